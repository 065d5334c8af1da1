// Rotary tables (host F32 cos/sin per token and pair) for the two schemes of the aggregator.
#pragma once

#include <cstdint>

#include "lingbot/tensor.h"

namespace lingbot {

// Frame blocks: 2D RoPE, base `freq`; specials at (0, 0), patch (y, x) at (y + 1, x + 1);
// rows rotate the first half of the head, columns the second. Angles in float32.
// Returns cos, sin [frames * (specials + gh*gw), head_dim / 2] for RopePairs::HalfSplit.
void rope2d_table(int64_t frames, int64_t specials, int64_t gh, int64_t gw, int64_t head_dim,
                  float freq, Tensor* cos, Tensor* sin);

// Global blocks: 3D RoPE (time, height, width split 20/22/22 of 64 dims), base 10000, angles
// and trig in float64. Frame i of the call has time index t0 + i; special k sits at (t, k, k),
// patch (y, x) at (t, specials + y, specials + x). Returns tables for RopePairs::Interleaved.
void rope3d_table(int64_t frames, int64_t t0, int64_t specials, int64_t gh, int64_t gw,
                  int64_t head_dim, Tensor* cos, Tensor* sin);

}  // namespace lingbot
