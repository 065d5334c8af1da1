# The network servers, both on Boost.Beast (headers only) over the HTTP layer of src/net: the
# stream server of `lingbot-map serve` (src/serve), built whenever Boost is found, and the browser
# viewer (src/viewer, web/viewer), whose page is bundled by esbuild from web/viewer's npm packages
# (scripts/setup.sh installs them) and compiled into the library, so the program serves it
# offline from memory. LINGBOT_VIEWER=AUTO builds the viewer when both are present; OFF (or AUTO
# without them) leaves `view` and `run --view` out. LINGBOT_SERVER works the same for `serve`.
set(LINGBOT_VIEWER "AUTO" CACHE STRING
    "Browser viewer (needs Boost headers, node and web/viewer/node_modules): AUTO, ON or OFF")
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
  find_program(LINGBOT_NODE node)
  set(LINGBOT_ESBUILD ${LINGBOT_WEB}/node_modules/.bin/esbuild)
  if(LINGBOT_BEAST_INCLUDE AND LINGBOT_NODE AND EXISTS ${LINGBOT_ESBUILD} AND Threads_FOUND)
    set(LINGBOT_WITH_VIEWER ON)
  elseif(LINGBOT_VIEWER STREQUAL "ON")
    message(FATAL_ERROR "LINGBOT_VIEWER=ON needs Boost headers (libboost-dev), node and "
                        "`npm ci` in web/viewer (scripts/setup.sh does both)")
  endif()
endif()
message(STATUS "lingbot: browser viewer ${LINGBOT_WITH_VIEWER}, stream server ${LINGBOT_WITH_SERVER}")

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
  file(GLOB viewer_js CONFIGURE_DEPENDS ${LINGBOT_WEB}/src/*.js)
  add_custom_command(
    OUTPUT ${out}/viewer.js
    COMMAND ${LINGBOT_ESBUILD} src/main.js --bundle --minify --format=esm --target=es2020
            --log-level=warning --outfile=${out}/viewer.js
    DEPENDS ${viewer_js} ${LINGBOT_WEB}/package-lock.json
    WORKING_DIRECTORY ${LINGBOT_WEB}
    COMMENT "Bundling the viewer's page (esbuild)"
    VERBATIM)
  # path|content type|file, one per asset.
  set(assets "/|text/html|${LINGBOT_WEB}/index.html"
             "/style.css|text/css|${LINGBOT_WEB}/style.css"
             "/viewer.js|text/javascript|${out}/viewer.js")
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
  if(LINGBOT_WITH_SERVER)  # `serve --view`: live streams in the viewer
    set_source_files_properties(${serve_sources} PROPERTIES COMPILE_DEFINITIONS LINGBOT_SERVE_VIEW=1)
  endif()
  # For the program and the tests (and installed consumers): lingbot's own sources do not need it,
  # so switching the viewer recompiles only them.
  target_compile_definitions(lingbot INTERFACE LINGBOT_HAVE_VIEWER=1)
endif()
