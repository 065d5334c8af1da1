# Evaluation (src/eval, `lingbot-map eval`, lingbot_map.eval): trajectory alignment and the plot
# need Eigen's SVD and eigen-solver, the point-cloud metrics nanoflann's k-d tree; both are
# header-only Debian packages (libeigen3-dev, libnanoflann-dev). Without them the readers and the
# other metrics are still built and the rest says what is missing (src/eval/unavailable.cpp).
# The include folders are set on the files that need them only, so nothing else recompiles.
find_path(LINGBOT_EIGEN_INCLUDE Eigen/Dense PATH_SUFFIXES eigen3)
find_path(LINGBOT_NANOFLANN_INCLUDE nanoflann.hpp)
set(eval_dir ${CMAKE_SOURCE_DIR}/src/eval)
set(eval_sources ${eval_dir}/trajectory_io.cpp ${eval_dir}/trajectory_metrics.cpp
                 ${eval_dir}/statistics.cpp ${eval_dir}/depth_io.cpp ${eval_dir}/depth_metrics.cpp
                 ${eval_dir}/npy.cpp ${eval_dir}/point_cloud_io.cpp ${eval_dir}/report_json.cpp
                 ${eval_dir}/option_names.cpp)
if(LINGBOT_EIGEN_INCLUDE AND LINGBOT_NANOFLANN_INCLUDE)
  set(LINGBOT_WITH_EVAL ON)
  set(with_eigen ${eval_dir}/alignment.cpp ${eval_dir}/plot.cpp)
  list(APPEND eval_sources ${with_eigen} ${eval_dir}/point_cloud_metrics.cpp)
  # A system folder (nanoflann in /usr/include) must not be named again: -I/usr/include breaks
  # libstdc++'s #include_next.
  foreach(pair "${LINGBOT_EIGEN_INCLUDE}|${with_eigen}"
               "${LINGBOT_NANOFLANN_INCLUDE}|${eval_dir}/point_cloud_metrics.cpp")
    string(REPLACE "|" ";" pair "${pair}")
    list(POP_FRONT pair dir)
    if(NOT dir IN_LIST CMAKE_CXX_IMPLICIT_INCLUDE_DIRECTORIES)
      set_source_files_properties(${pair} PROPERTIES INCLUDE_DIRECTORIES ${dir})
    endif()
  endforeach()
else()
  set(LINGBOT_WITH_EVAL OFF)
  list(APPEND eval_sources ${eval_dir}/unavailable.cpp)
endif()
target_sources(lingbot PRIVATE ${eval_sources})
message(STATUS "lingbot: evaluation metrics ${LINGBOT_WITH_EVAL} (Eigen: ${LINGBOT_EIGEN_INCLUDE}, "
               "nanoflann: ${LINGBOT_NANOFLANN_INCLUDE})")
