# The MCAP export (`--export mcap`, src/io/mcap/ and src/io/sinks/mcap.cpp) compresses its chunks
# with zstd (Debian libzstd-dev, found through pkg-config). Without it the library builds with
# src/io/sinks/mcap_unavailable.cpp, whose sink says in one line what is missing.
set(LINGBOT_MCAP "AUTO" CACHE STRING "The MCAP export (needs libzstd): AUTO or OFF")
set(LINGBOT_WITH_MCAP OFF)
if(NOT LINGBOT_MCAP STREQUAL "OFF")
  find_package(PkgConfig QUIET)
  if(PkgConfig_FOUND)
    pkg_check_modules(LINGBOT_ZSTD QUIET IMPORTED_TARGET libzstd)
  endif()
  if(LINGBOT_ZSTD_FOUND)
    set(LINGBOT_WITH_MCAP ON)
  endif()
endif()
if(LINGBOT_WITH_MCAP)
  target_sources(lingbot PRIVATE ${CMAKE_SOURCE_DIR}/src/io/mcap/cdr.cpp
                                 ${CMAKE_SOURCE_DIR}/src/io/mcap/ros_messages.cpp
                                 ${CMAKE_SOURCE_DIR}/src/io/mcap/writer.cpp
                                 ${CMAKE_SOURCE_DIR}/src/io/sinks/mcap.cpp)
  target_link_libraries(lingbot PRIVATE PkgConfig::LINGBOT_ZSTD)
  message(STATUS "lingbot: MCAP export ON (zstd ${LINGBOT_ZSTD_VERSION})")
else()
  target_sources(lingbot PRIVATE ${CMAKE_SOURCE_DIR}/src/io/sinks/mcap_unavailable.cpp)
  message(STATUS "lingbot: MCAP export OFF (no zstd: libzstd-dev)")
endif()
