// The test sky segmentation model (tests/python/sky_model.py), made with the Python that has the
// onnx package; tests skip where there is none.
#pragma once

#include <cstdlib>
#include <filesystem>
#include <string>

namespace lingbot::test {

// A python3 that imports onnx and numpy (the Debian one where the PATH's lacks them), or "".
inline std::string python_with_onnx() {
  for (const char* py : {"python3", "/usr/bin/python3"}) {
    const std::string cmd = std::string(py) + " -c 'import onnx, numpy' >/dev/null 2>&1";
    if (std::system(cmd.c_str()) == 0) return py;
  }
  return "";
}

// Writes sky.onnx, scene.npy and expected.npy into `dir` (made if missing); false when it
// cannot.
inline bool make_sky_model(const std::string& dir) {
  const std::string py = python_with_onnx();
  if (py.empty()) return false;
  std::filesystem::create_directories(dir);
  const std::string cmd = py + " " + LINGBOT_SOURCE_DIR + "/tests/python/sky_model.py " + dir;
  return std::system(cmd.c_str()) == 0;
}

}  // namespace lingbot::test
