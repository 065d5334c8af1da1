// Pieces shared by the attention kernels (attention.cu: mma.sync and generic kernels, the merge
// and the dispatch; attention_wgmma.cu: the Hopper kernel).
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdlib>

#include "backend/cuda/device_utils.cuh"
#include "backend/cuda/mma.cuh"
#include "backend/scratch.h"
#include "backend/switches.h"

namespace lingbot::cuda::attn {

constexpr float kLog2e = 1.4426950408889634f;

// Device view of the segment table. Keys are numbered across segments in list order;
// start[i] is the number of keys before segment i and start[nseg] the total.
struct SegTable {
  const int64_t* start;
  const char* const* k;
  const char* const* v;
  int nseg;
};

struct KernelArgs {
  const void* q;
  void* out;
  Elt out_t;
  float* part_o;    // [splits, nq, heads, dim] when splits > 1
  float* part_lse;  // [splits, nq, heads], log2 domain
  SegTable seg;
  int nq, heads, dim;
  int64_t nk, keys_per_split;
  int splits;
  float scale_log2;
  bool rows16;  // every K/V row starts 16-byte aligned and is a whole number of 16-byte chunks
  const float* kv_scales;  // null: K/V in the queries' dtype; else e4m3, [2, heads] scales
};

__device__ __forceinline__ int find_segment(const SegTable& t, int64_t key) {
  int lo = 0, hi = t.nseg - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) >> 1;
    if (t.start[mid] <= key)
      lo = mid;
    else
      hi = mid - 1;
  }
  return lo;
}

// Writes one finished row fragment: final output when there is a single split, else the partial
// output (already divided by its own sum) and its log2-sum-exp for the merge.
__device__ __forceinline__ void store_pair(const KernelArgs& a, int row, int h, int col, float v0,
                                           float v1) {
  if (a.splits == 1) {
    const int64_t idx = (int64_t(row) * a.heads + h) * a.dim + col;
    store_elt(a.out, a.out_t, idx, v0);
    store_elt(a.out, a.out_t, idx + 1, v1);
  } else {
    const int64_t idx = ((int64_t(blockIdx.z) * a.nq + row) * a.heads + h) * a.dim + col;
    *reinterpret_cast<float2*>(a.part_o + idx) = make_float2(v0, v1);
  }
}

__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}

// Picks the number of key splits: enough CTAs to fill every resident slot of the GPU without
// leaving a mostly idle last wave, with a small charge per split for the merge traffic.
inline int choose_splits(int64_t base_ctas, int64_t slots, int64_t tiles,
                         int64_t min_tiles_per_split) {
  const int64_t max_splits = std::max<int64_t>(
      1, std::min<int64_t>(scratch::kMaxAttentionSplits, tiles / min_tiles_per_split));
  int best = 1;
  double best_score = -1;
  for (int64_t s = 1; s <= max_splits; ++s) {
    const int64_t ctas = base_ctas * s;
    const int64_t waves = (ctas + slots - 1) / slots;
    const double fill = static_cast<double>(ctas) / static_cast<double>(waves * slots);
    const double score = fill - 0.01 * static_cast<double>(s);
    if (score > best_score + 1e-9) {
      best_score = score;
      best = static_cast<int>(s);
    }
  }
  return best;
}

// Rounds the split count so every split holds whole tiles and none is empty, and takes the
// partial-output buffers from scratch when there is more than one split.
inline void plan_splits(Context& ctx, KernelArgs& k, int64_t tiles, int tile_keys, int splits) {
  k.splits = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(splits, tiles)));
  const int64_t tiles_per_split = (tiles + k.splits - 1) / k.splits;
  k.keys_per_split = tiles_per_split * tile_keys;
  k.splits = static_cast<int>((tiles + tiles_per_split - 1) / tiles_per_split);
  if (k.splits > 1) {
    const size_t bytes = static_cast<size_t>(k.splits) * k.nq * k.heads * (k.dim + 1) * 4;
    float* part = static_cast<float*>(ctx.scratch.get(bytes, ctx.stream));
    k.part_o = part;
    k.part_lse = part + static_cast<size_t>(k.splits) * k.nq * k.heads * k.dim;
  }
}

// attention_wgmma.cu: the sm_90a kernel (head_dim 64, bf16 or e4m3 K/V). Available where
// Context::hopper (compute capability 9.0, not the portable path).
bool wgmma_supported(const Context& ctx);
// LINGBOT_ATTN_SPLITS-style forced split count (0 = automatic). Sets k.splits.
void launch_wgmma(Context& ctx, KernelArgs& k, int forced_splits);

}  // namespace lingbot::cuda::attn
