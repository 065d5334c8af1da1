# The loop-closure back-end's solver: src/loop/ceres_solver.cpp with Ceres (libceres-dev), else
# src/loop/no_solver.cpp, which says at run time that it is missing (the GPU machines have no
# Ceres); the rest of src/loop (Sim(3), the graph's bookkeeping, the worker) is always built.
# Ceres' include directories and definitions (Eigen, glog) reach the one library that needs
# them.
set(LINGBOT_LOOP_CLOSURE "AUTO" CACHE STRING "Loop closure's pose-graph solver (needs Ceres): AUTO, ON or OFF")
set(LINGBOT_WITH_CERES OFF)
if(NOT LINGBOT_LOOP_CLOSURE STREQUAL "OFF")
  find_package(Ceres QUIET)
  if(Ceres_FOUND)
    set(LINGBOT_WITH_CERES ON)
  elseif(LINGBOT_LOOP_CLOSURE STREQUAL "ON")
    message(FATAL_ERROR "LINGBOT_LOOP_CLOSURE=ON needs Ceres (libceres-dev)")
  endif()
endif()
message(STATUS "lingbot: loop closure (Ceres) ${LINGBOT_WITH_CERES}")

if(LINGBOT_WITH_CERES)
  # A static library of its own (installed and exported with lingbot): its PRIVATE link to Ceres
  # reaches lingbot's link line only, never lingbot's compile lines.
  add_library(lingbot_loop_solver STATIC src/loop/ceres_solver.cpp)
  target_include_directories(lingbot_loop_solver PRIVATE include src)
  target_compile_options(lingbot_loop_solver PRIVATE -Wall -Wextra -Wno-unused-parameter)
  target_link_libraries(lingbot_loop_solver PRIVATE Ceres::ceres)
  target_link_libraries(lingbot PRIVATE lingbot_loop_solver)
else()
  target_sources(lingbot PRIVATE src/loop/no_solver.cpp)
endif()

# Loop detection's image features (src/loop/features_opencv.cpp) need OpenCV (Debian
# libopencv-dev): core, features2d (ORB, matching) and calib3d (the RANSAC fundamental matrix).
# Without it the library builds with src/loop/features_none.cpp, whose calls say so in one line,
# and `run --loop-closure` is refused. OpenCV's headers are seen by that one file only (an object
# library of its own) and its libraries are linked without their usage requirements, so nothing
# else of the library is compiled differently with or without it.
set(LINGBOT_LOOP "AUTO" CACHE STRING "Loop detection (needs OpenCV): AUTO, ON or OFF")
set(LINGBOT_WITH_OPENCV OFF)
if(NOT LINGBOT_LOOP STREQUAL "OFF")
  find_package(OpenCV QUIET COMPONENTS core features2d calib3d)
  if(OpenCV_FOUND)
    set(LINGBOT_WITH_OPENCV ON)
  elseif(LINGBOT_LOOP STREQUAL "ON")
    message(FATAL_ERROR "LINGBOT_LOOP=ON needs OpenCV (libopencv-dev)")
  endif()
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
