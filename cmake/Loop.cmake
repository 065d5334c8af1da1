# The loop-closure back-end's solver: src/loop/ceres_solver.cpp with Ceres (libceres-dev), else
# src/loop/no_solver.cpp, which says at run time that it is missing (the GPU machines have no
# Ceres); the rest of src/loop (Sim(3), the graph's bookkeeping, the worker) is always built.
# Ceres' include directories and definitions (Eigen, glog) reach the one library that needs
# them. Loop detection's image features, built on OpenCV, are in cmake/OpenCV.cmake.
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
