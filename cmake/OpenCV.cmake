# The parts of the library built on OpenCV (found in cmake/Dependencies.cmake). Their sources
# compile in a small object library of their own, so that OpenCV's include folders reach those
# files only; lingbot takes their objects and links OpenCV's libraries (link-only: nothing else
# is compiled against its headers). An installed lingbot finds OpenCV again (lingbotConfig.cmake).
if(LINGBOT_WITH_OPENCV_DNN)
  add_library(lingbot_opencv OBJECT src/io/sky_segmenter_opencv.cpp)
  target_include_directories(lingbot_opencv PRIVATE include src)
  target_compile_options(lingbot_opencv PRIVATE -Wall -Wextra -Wno-unused-parameter)
  target_link_libraries(lingbot_opencv PRIVATE opencv_core opencv_imgproc opencv_dnn)
  target_sources(lingbot PRIVATE $<TARGET_OBJECTS:lingbot_opencv>)
  target_link_libraries(lingbot PRIVATE $<LINK_ONLY:opencv_dnn> $<LINK_ONLY:opencv_imgproc>
                                        $<LINK_ONLY:opencv_core>)
else()
  target_sources(lingbot PRIVATE src/io/sky_segmenter_none.cpp)
endif()
