// Synthetic weights v1: a deterministic stand-in for a trained checkpoint, a pure function of
// (seed, tensor name, shape). Every value is a small integer times a power of two, so bf16 and
// fp16 copies are exact.
#pragma once

#include <cstdint>
#include <string>

#include "lingbot/tensor.h"

namespace lingbot {

uint64_t splitmix64(uint64_t x);
uint64_t fnv1a64(const std::string& s);

// F32 host tensor with the values the rule gives `name` at `shape`.
Tensor synthetic_tensor(uint64_t seed, const std::string& name, const Shape& shape);

}  // namespace lingbot
