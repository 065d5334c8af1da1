// Any bytes: the readers behind `lingbot-map eval` (TUM and KITTI trajectories, PLY point
// clouds, .npy depth maps) return what they parsed or throw lingbot::Error, nothing else. The
// first byte picks the reader, so one corpus seeds all four.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "eval/npy.h"
#include "lingbot/error.h"
#include "lingbot/eval.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
  volatile double sink = 0;
  try {
    switch (data[0] % 4) {
      case 0:
        for (const auto& p : lingbot::eval::parse_tum(text, "fuzz").poses) sink = sink + p[0];
        break;
      case 1:
        for (const auto& p : lingbot::eval::parse_kitti(text, "fuzz").poses) sink = sink + p[11];
        break;
      case 2:
        for (double v : lingbot::eval::parse_ply(text, "fuzz").xyz) sink = sink + v;
        break;
      default:
        for (double v : lingbot::eval::parse_npy(text, "fuzz").values) sink = sink + v;
    }
  } catch (const lingbot::Error&) {
  }
  return 0;
}
