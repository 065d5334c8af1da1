# The network servers, both on Boost.Beast (headers only) over the HTTP layer of src/net: the
# stream server of `lingbot-map serve` (src/serve), built whenever Boost is found, and the browser
# viewer (src/viewer, web/viewer), whose page is compiled into the library, so the program serves
# it offline from memory. The page's script is web/viewer/dist/viewer.js, esbuild's bundle of
# web/viewer/src and three.js, committed so that a build needs neither node nor npm. Where
# web/viewer's npm packages are installed (scripts/setup.sh), the build bundles the sources
# afresh, serves that bundle, and the test Viewer.BundleIsCurrent fails until
# `cmake --build build --target viewer_bundle` has copied it over the committed one.
# LINGBOT_VIEWER=AUTO builds the viewer when Boost is present; OFF (or AUTO without it) leaves
# `view` and `run --view` out. LINGBOT_SERVER works the same for `serve`.
set(LINGBOT_VIEWER "AUTO" CACHE STRING "Browser viewer (needs Boost headers): AUTO, ON or OFF")
set(LINGBOT_SERVER "AUTO" CACHE STRING "Stream server `serve` (needs Boost headers): AUTO, ON or OFF")
set(LINGBOT_WITH_VIEWER OFF)
set(LINGBOT_WITH_SERVER OFF)
set(LINGBOT_WEB ${CMAKE_SOURCE_DIR}/web/viewer)
if(NOT LINGBOT_VIEWER STREQUAL "OFF" OR NOT LINGBOT_SERVER STREQUAL "OFF")
  find_path(LINGBOT_BEAST_INCLUDE boost/beast.hpp)
  find_package(Threads)
endif()
if(NOT LINGBOT_SERVER STREQUAL "OFF")
  if(LINGBOT_BEAST_INCLUDE AND Threads_FOUND)
    set(LINGBOT_WITH_SERVER ON)
  elseif(LINGBOT_SERVER STREQUAL "ON")
    message(FATAL_ERROR "LINGBOT_SERVER=ON needs Boost headers (libboost-dev)")
  endif()
endif()
if(NOT LINGBOT_VIEWER STREQUAL "OFF")
  if(LINGBOT_BEAST_INCLUDE AND Threads_FOUND)
    set(LINGBOT_WITH_VIEWER ON)
    find_program(LINGBOT_NODE node)
    set(LINGBOT_ESBUILD ${LINGBOT_WEB}/node_modules/.bin/esbuild)
    set(LINGBOT_BUNDLE_VIEWER OFF)  # bundle web/viewer/src here, or serve the committed bundle
    if(LINGBOT_NODE AND EXISTS ${LINGBOT_ESBUILD})
      set(LINGBOT_BUNDLE_VIEWER ON)
    endif()
  elseif(LINGBOT_VIEWER STREQUAL "ON")
    message(FATAL_ERROR "LINGBOT_VIEWER=ON needs Boost headers (libboost-dev)")
  endif()
endif()
message(STATUS "lingbot: browser viewer ${LINGBOT_WITH_VIEWER} (bundled here: ${LINGBOT_BUNDLE_VIEWER}), "
               "stream server ${LINGBOT_WITH_SERVER}")

if(LINGBOT_WITH_VIEWER OR LINGBOT_WITH_SERVER)
  file(GLOB net_sources CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/src/net/*.cpp)
  target_sources(lingbot PRIVATE ${net_sources})
  target_include_directories(lingbot PRIVATE ${LINGBOT_BEAST_INCLUDE})
  target_link_libraries(lingbot PUBLIC Threads::Threads)
endif()
if(LINGBOT_WITH_SERVER)
  file(GLOB serve_sources CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/src/serve/*.cpp)
  target_sources(lingbot PRIVATE ${serve_sources})
  # For the program and the tests, as LINGBOT_HAVE_VIEWER below.
  target_compile_definitions(lingbot INTERFACE LINGBOT_HAVE_SERVER=1)
endif()

if(LINGBOT_WITH_VIEWER)
  set(out ${CMAKE_BINARY_DIR}/viewer)
  set(LINGBOT_VIEWER_JS ${LINGBOT_WEB}/dist/viewer.js)
  if(LINGBOT_BUNDLE_VIEWER)
    file(GLOB viewer_js CONFIGURE_DEPENDS ${LINGBOT_WEB}/src/*.js)
    add_custom_command(
      OUTPUT ${out}/viewer.js
      COMMAND ${LINGBOT_ESBUILD} src/main.js --bundle --minify --format=esm --target=es2020
              --log-level=warning --outfile=${out}/viewer.js
      DEPENDS ${viewer_js} ${LINGBOT_WEB}/package-lock.json
      WORKING_DIRECTORY ${LINGBOT_WEB}
      COMMENT "Bundling the viewer's page (esbuild)"
      VERBATIM)
    add_custom_target(viewer_bundle
      COMMAND ${CMAKE_COMMAND} -E copy ${out}/viewer.js ${LINGBOT_VIEWER_JS}
      DEPENDS ${out}/viewer.js
      COMMENT "Copying the fresh bundle over web/viewer/dist/viewer.js (commit it)"
      VERBATIM)
    set(LINGBOT_VIEWER_JS ${out}/viewer.js)
  endif()
  # path|content type|file, one per asset.
  set(assets "/|text/html|${LINGBOT_WEB}/index.html"
             "/style.css|text/css|${LINGBOT_WEB}/style.css"
             "/viewer.js|text/javascript|${LINGBOT_VIEWER_JS}")
  set(asset_files "")
  foreach(a ${assets})
    string(REGEX REPLACE "^.*\\|" "" f "${a}")
    list(APPEND asset_files ${f})
  endforeach()
  string(REPLACE ";" "," assets_arg "${assets}")
  add_custom_command(
    OUTPUT ${out}/assets_data.cpp
    COMMAND ${CMAKE_COMMAND} "-DASSETS=${assets_arg}" -DOUT=${out}/assets_data.cpp -P
            ${CMAKE_SOURCE_DIR}/cmake/embed_assets.cmake
    DEPENDS ${asset_files} ${CMAKE_SOURCE_DIR}/cmake/embed_assets.cmake
    COMMENT "Embedding the viewer's page"
    VERBATIM)
  file(GLOB viewer_sources CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/src/viewer/*.cpp)
  target_sources(lingbot PRIVATE ${viewer_sources} ${out}/assets_data.cpp)
  set_source_files_properties(${net_sources} ${viewer_sources} PROPERTIES UNITY_GROUP src_beast)
  if(LINGBOT_WITH_SERVER)  # `serve --view`: live streams in the viewer
    set_source_files_properties(${serve_sources} PROPERTIES COMPILE_DEFINITIONS LINGBOT_SERVE_VIEW=1)
  endif()
  # For the program and the tests (and installed consumers): lingbot's own sources do not need it,
  # so switching the viewer recompiles only them.
  target_compile_definitions(lingbot INTERFACE LINGBOT_HAVE_VIEWER=1)
endif()
