// split_qkv: one warp per (row, q|k|v, head). q/k get the per-head LayerNorm and the rotary
// embedding in fp32 before the single rounding to the output dtype, which is where the
// reference rounds them too (they enter attention as bf16).
#include "backend/cuda/device_utils.cuh"

namespace lingbot::cuda {
namespace {

constexpr int kWarps = 8;
constexpr int kMaxPerLane = 8;  // head_dim <= 256

template <class In, class Out>
__global__ void __launch_bounds__(kWarps * 32)
    split_qkv_kernel(const SplitQkvArgs a, int64_t items) {
  __shared__ float buf[kWarps][kMaxPerLane * 32];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t item = int64_t(blockIdx.x) * kWarps + warp;
  if (item >= items) return;
  const int h = a.heads, d = a.dim;
  const int head = static_cast<int>(item % h);
  const int which = static_cast<int>((item / h) % 3);
  const int64_t row = item / (3LL * h);

  const In* src = static_cast<const In*>(a.qkv) + (row * 3 + which) * h * d + int64_t(head) * d;
  Out* dst = static_cast<Out*>(which == 0 ? a.q : which == 1 ? a.k : a.v) + (row * h + head) * d;

  float x[kMaxPerLane];
#pragma unroll
  for (int i = 0; i < kMaxPerLane; ++i) {
    const int e = lane + 32 * i;
    x[i] = e < d ? to_f32(src[e]) : 0.f;
  }
  if (which == 2) {
#pragma unroll
    for (int i = 0; i < kMaxPerLane; ++i) {
      const int e = lane + 32 * i;
      if (e < d) dst[e] = from_f32<Out>(x[i]);
    }
    return;
  }
  if (a.norm) {
    float s = 0.f;
#pragma unroll
    for (int i = 0; i < kMaxPerLane; ++i) s += x[i];
    const float mean = warp_sum(s) / static_cast<float>(d);
    float v = 0.f;
#pragma unroll
    for (int i = 0; i < kMaxPerLane; ++i) {
      const float c = lane + 32 * i < d ? x[i] - mean : 0.f;
      v += c * c;
    }
    const float r = rsqrtf(warp_sum(v) / static_cast<float>(d) + a.eps);
    const void* w = which == 0 ? a.qw : a.kw;
    const void* b = which == 0 ? a.qb : a.kb;
    const Elt wt = which == 0 ? a.qw_t : a.kw_t, bt = which == 0 ? a.qb_t : a.kb_t;
#pragma unroll
    for (int i = 0; i < kMaxPerLane; ++i) {
      const int e = lane + 32 * i;
      if (e >= d) continue;
      float o = (x[i] - mean) * r;
      if (w) o *= load_elt(w, wt, e);
      if (b) o += load_elt(b, bt, e);
      x[i] = o;
    }
  }
  if (!a.cos) {
#pragma unroll
    for (int i = 0; i < kMaxPerLane; ++i) {
      const int e = lane + 32 * i;
      if (e < d) dst[e] = from_f32<Out>(x[i]);
    }
    return;
  }
  // Rotary pairs straddle lanes: stage the head in shared memory, then each lane rotates pairs.
  float* sh = buf[warp];
#pragma unroll
  for (int i = 0; i < kMaxPerLane; ++i) {
    const int e = lane + 32 * i;
    if (e < d) sh[e] = x[i];
  }
  __syncwarp();
  const int half = d / 2, quarter = d / 4;
  const float* cs = a.cos + row * half;
  const float* sn = a.sin + row * half;
  for (int p = lane; p < half; p += 32) {
    int i0, i1;
    if (a.interleaved) {
      i0 = 2 * p;
      i1 = 2 * p + 1;
    } else {
      const int hf = p / quarter, j = p % quarter;
      i0 = hf * half + j;
      i1 = i0 + quarter;
    }
    const float x0 = sh[i0], x1 = sh[i1], c = cs[p], s = sn[p];
    dst[i0] = from_f32<Out>(x0 * c - x1 * s);
    dst[i1] = from_f32<Out>(x0 * s + x1 * c);
  }
}

}  // namespace

void split_qkv(const SplitQkvArgs& a, cudaStream_t s) {
  LINGBOT_CHECK(a.dim > 0 && a.dim <= kMaxPerLane * 32,
                "split_qkv: head_dim " + std::to_string(a.dim) + " is above the CUDA limit 256");
  LINGBOT_CHECK(!a.cos || a.dim % (a.interleaved ? 2 : 4) == 0,
                "split_qkv: head_dim does not split into rotary pairs");
  const int64_t items = a.rows * 3 * a.heads;
  if (items <= 0) return;
  const int64_t blocks = (items + kWarps - 1) / kWarps;
  LINGBOT_CHECK(blocks <= 0x7fffffff, "split_qkv: too many rows for one launch");
  dispatch_elt(a.qkv_t, [&](auto iv) {
    using In = decltype(iv);
    dispatch_elt(a.out_t, [&](auto ov) {
      using Out = decltype(ov);
      split_qkv_kernel<In, Out><<<static_cast<unsigned>(blocks), kWarps * 32, 0, s>>>(a, items);
    });
  });
  LB_CUDA_LAUNCHED();
}

}  // namespace lingbot::cuda
