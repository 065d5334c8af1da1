// NumPy .npy arrays in (numeric, C order), for depth maps.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace lingbot::eval {

struct Npy {
  std::vector<int64_t> shape;
  std::vector<double> values;  // C order
  bool integer = false;        // the file held integers (depth in PNG units)
};

// Formats 1.0 to 3.0; dtypes float16/32/64 and (u)int8/16/32/64, little-endian, C order. Throws
// Error naming `what` for anything else, a damaged header, or data shorter than the shape.
Npy parse_npy(std::string_view bytes, const std::string& what);

}  // namespace lingbot::eval
