// Shared by the fuzz targets: touch every byte a returned tensor claims, so the sanitizer sees a
// view that points outside the input.
#pragma once

#include <cstdint>

#include "weights/tensor_map.h"

namespace lingbot::fuzz {

inline void touch(const TensorMap& tensors) {
  volatile uint8_t sink = 0;
  for (auto& [name, t] : tensors) {
    const auto* p = static_cast<const uint8_t*>(t.raw());
    uint8_t acc = static_cast<uint8_t>(name.size());
    for (size_t i = 0; i < t.nbytes(); ++i) acc ^= p[i];
    sink = sink ^ acc;
  }
}

}  // namespace lingbot::fuzz
