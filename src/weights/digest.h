// The identity of a model's weights: a 64-bit digest over every tensor's name, dtype, shape and
// bytes, so that a session snapshot is resumed only on the weights that made it. It tells
// weights apart; it is no defence against someone forging a file (for that, sign the file).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "weights/tensor_map.h"

namespace lingbot {

// 64 bits of `bytes` at `data`, mixed with `seed`: four independent lanes of multiply-rotate
// rounds (several GB/s on one core, memory-bound with the tensors hashed in parallel).
uint64_t digest_bytes(const void* data, size_t bytes, uint64_t seed = 0);

// The digest of a checkpoint's tensors as stored (a bf16 conversion of the same weights is
// other weights: its results differ), as 16 hex digits.
std::string weights_digest(const TensorMap& tensors);
// Synthetic weights are a function of their seed (and the architecture, checked apart).
std::string synthetic_weights_digest(uint64_t seed);

}  // namespace lingbot
