// The viewer's web page, built from web/viewer by esbuild and compiled into the library (a
// generated assets.cpp): the server answers only these paths and reads nothing from disk.
#pragma once

#include <cstddef>
#include <string_view>

namespace lingbot::viewer {

struct Asset {
  std::string_view path;  // "/", "/viewer.js", ...
  std::string_view type;  // Content-Type
  std::string_view body;
};

// nullptr for any other path.
const Asset* find_asset(std::string_view path);

}  // namespace lingbot::viewer
