# OpenCV (Debian libopencv-dev, optional), found once here for the two parts built on it:
# - sky segmentation models (--mask-sky): core, imgproc and dnn; without them
#   src/io/sky_segmenter_none.cpp says that no model can run (LINGBOT_OPENCV=OFF leaves it out);
# - loop detection's image features (--loop-closure): core, features2d (ORB, matching) and
#   calib3d (the RANSAC fundamental matrix); without them src/loop/features_none.cpp, whose calls
#   say so in one line, and `run --loop-closure` is refused (LINGBOT_LOOP: AUTO, ON or OFF).
# Each part's sources compile in a small object library of their own, so that OpenCV's include
# folders reach those files only; lingbot takes their objects and links OpenCV's libraries
# link-only (nothing else is compiled against its headers, or differently without it). An
# installed lingbot finds OpenCV again (lingbotConfig.cmake).
set(LINGBOT_OPENCV "AUTO" CACHE STRING "OpenCV (sky segmentation models): AUTO or OFF")
set(LINGBOT_LOOP "AUTO" CACHE STRING "Loop detection (needs OpenCV): AUTO, ON or OFF")
set(LINGBOT_WITH_OPENCV_DNN OFF)
set(LINGBOT_WITH_OPENCV OFF)  # loop detection's features
if(NOT LINGBOT_OPENCV STREQUAL "OFF" OR NOT LINGBOT_LOOP STREQUAL "OFF")
  find_package(OpenCV QUIET OPTIONAL_COMPONENTS core imgproc dnn features2d calib3d)
endif()
if(OpenCV_FOUND AND OpenCV_core_FOUND)
  if(NOT LINGBOT_OPENCV STREQUAL "OFF" AND OpenCV_imgproc_FOUND AND OpenCV_dnn_FOUND)
    set(LINGBOT_WITH_OPENCV_DNN ON)
  endif()
  if(NOT LINGBOT_LOOP STREQUAL "OFF" AND OpenCV_features2d_FOUND AND OpenCV_calib3d_FOUND)
    set(LINGBOT_WITH_OPENCV ON)
  endif()
endif()
if(LINGBOT_LOOP STREQUAL "ON" AND NOT LINGBOT_WITH_OPENCV)
  message(FATAL_ERROR "LINGBOT_LOOP=ON needs OpenCV (libopencv-dev)")
endif()
message(STATUS "lingbot: sky segmentation models (OpenCV DNN) ${LINGBOT_WITH_OPENCV_DNN}")

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

if(LINGBOT_WITH_OPENCV)
  add_library(lingbot_loop_cv OBJECT ${CMAKE_SOURCE_DIR}/src/loop/features_opencv.cpp)
  target_include_directories(lingbot_loop_cv PRIVATE ${CMAKE_SOURCE_DIR}/src
                                                     ${CMAKE_SOURCE_DIR}/include)
  target_include_directories(lingbot_loop_cv SYSTEM PRIVATE ${OpenCV_INCLUDE_DIRS})
  target_compile_options(lingbot_loop_cv PRIVATE -Wall -Wextra -Wno-unused-parameter)
  target_sources(lingbot PRIVATE $<TARGET_OBJECTS:lingbot_loop_cv>)
  foreach(lib opencv_core opencv_features2d opencv_calib3d)
    target_link_libraries(lingbot PRIVATE $<LINK_ONLY:${lib}>)
  endforeach()
  message(STATUS "lingbot: loop detection (OpenCV ${OpenCV_VERSION}) ON")
else()
  target_sources(lingbot PRIVATE ${CMAKE_SOURCE_DIR}/src/loop/features_none.cpp)
  message(STATUS "lingbot: loop detection OFF (no OpenCV: libopencv-dev)")
endif()
