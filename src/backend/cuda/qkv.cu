// split_qkv: q/k get the per-head LayerNorm and the rotary embedding in fp32 before the single
// rounding to the output dtype, which is where the reference rounds them too (they enter
// attention as bf16).
//
// The fast kernel gives one warp a whole (row, q|k|v) slice, contiguous in both the input and
// the output, and each lane eight consecutive elements in 16-byte accesses: a head is D / 8
// lanes, so its statistics are a few shuffles, and a rotary pair is either inside one lane
// (interleaved) or a quarter head apart, D / 32 lanes (half split). The first version, one warp
// per (row, q|k|v, head) with 2-byte accesses, took 25 us per call at 978 x 3072 and stays as
// the fallback for head sizes the fast kernel does not cover.
#include <cuda_fp8.h>

#include "backend/cuda/device_utils.cuh"

namespace lingbot::cuda {
namespace {

constexpr int kWarps = 8;
constexpr int kMaxPerLane = 8;  // head_dim <= 256

template <class In, class Out, int D>
__global__ void __launch_bounds__(kWarps * 32)
    split_qkv_fast_kernel(const SplitQkvArgs a, int64_t items) {
  await_inputs();
  constexpr int kLanes = D / 8;     // lanes per head
  constexpr int kQuarter = D / 32;  // lanes between the two elements of a half-split pair
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t item = int64_t(blockIdx.x) * kWarps + warp;
  if (item >= items) return;  // whole warps only: the shuffles below see all 32 lanes
  const int which = static_cast<int>(item % 3);
  const int64_t row = item / 3;
  const int width = a.heads * D, chunks = width / 8;
  const In* src = static_cast<const In*>(a.qkv) + (row * 3 + which) * width;
  Out* dst = static_cast<Out*>(which == 0 ? a.q : which == 1 ? a.k : a.v) + row * width;
  const int o0 = (lane % kLanes) * 8;  // offset of this lane's chunk inside its head

  for (int c0 = 0; c0 < chunks; c0 += 32) {
    const bool active = c0 + lane < chunks;
    float x[8];
    if (active)
      load_vec<8>(src + (c0 + lane) * 8, x);
    else
#pragma unroll
      for (int i = 0; i < 8; ++i) x[i] = 0.f;
    if (which != 2 && a.norm) {
      float s = 0.f;
#pragma unroll
      for (int i = 0; i < 8; ++i) s += x[i];
#pragma unroll
      for (int o = 1; o < kLanes; o <<= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
      const float mean = s / static_cast<float>(D);
      float v = 0.f;
#pragma unroll
      for (int i = 0; i < 8; ++i) v += (x[i] - mean) * (x[i] - mean);
#pragma unroll
      for (int o = 1; o < kLanes; o <<= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
      const float r = rsqrtf(v / static_cast<float>(D) + a.eps);
      const void* w = which == 0 ? a.qw : a.kw;
      const void* b = which == 0 ? a.qb : a.kb;
      const Elt wt = which == 0 ? a.qw_t : a.kw_t, bt = which == 0 ? a.qb_t : a.kb_t;
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        float o = (x[i] - mean) * r;
        if (w) o *= load_elt(w, wt, o0 + i);
        if (b) o += load_elt(b, bt, o0 + i);
        x[i] = o;
      }
    }
    if (which != 2 && a.cos) {
      const float* cs = a.cos + row * (D / 2);
      const float* sn = a.sin + row * (D / 2);
      if (a.interleaved) {
        float c[4], s[4];
        load_vec<4>(cs + o0 / 2, c);
        load_vec<4>(sn + o0 / 2, s);
#pragma unroll
        for (int p = 0; p < 4; ++p) {
          const float x0 = x[2 * p], x1 = x[2 * p + 1];
          x[2 * p] = x0 * c[p] - x1 * s[p];
          x[2 * p + 1] = x0 * s[p] + x1 * c[p];
        }
      } else {
        // Pairs (j, j + D/4) inside each half of the head; the partner chunk is kQuarter lanes
        // away and both lanes of a pair use the same angles.
        const int half = o0 / (D / 2), j = o0 % (D / 2);
        const bool first = j < D / 4;
        const int p0 = half * (D / 4) + (first ? j : j - D / 4);
        float c[8], s[8];
        load_vec<8>(cs + p0, c);
        load_vec<8>(sn + p0, s);
#pragma unroll
        for (int i = 0; i < 8; ++i) {
          const float other = __shfl_xor_sync(0xffffffffu, x[i], kQuarter);
          x[i] = first ? x[i] * c[i] - other * s[i] : other * s[i] + x[i] * c[i];
        }
      }
    }
    if (!active) continue;
    if (which == 0 || a.direct_frames == 0) {
      store_vec<8>(dst + (c0 + lane) * 8, x);
      continue;
    }
    // Into the cache: the value rounded to the output dtype first, as k/v would hold it, then
    // (e4m3) divided by its head's scale and rounded again, exactly as the store would.
    const int64_t f = row / a.rows_per_frame, r = row % a.rows_per_frame;
    char* base = static_cast<char*>(which == 1 ? a.kd[f] : a.vd[f]);
    if (!a.direct_f8) {
      store_vec<8>(reinterpret_cast<Out*>(base) + r * width + (c0 + lane) * 8, x);
      continue;
    }
    const float s = a.ds[f][(which == 1 ? 0 : a.heads) + (c0 + lane) / kLanes];
    uint32_t packed[2] = {0u, 0u};
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const float e = __fdiv_rn(to_f32(from_f32<Out>(x[i])), s);
      packed[i / 4] |= uint32_t(__nv_cvt_float_to_fp8(e, __NV_SATFINITE, __NV_E4M3))
                       << (8 * (i % 4));
    }
    *reinterpret_cast<uint2*>(base + r * width + (c0 + lane) * 8) =
        make_uint2(packed[0], packed[1]);
  }
}

// The fallback: one warp per (row, q|k|v, head).
template <class In, class Out>
__global__ void __launch_bounds__(kWarps * 32)
    split_qkv_kernel(const SplitQkvArgs a, int64_t items) {
  await_inputs();
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

// The fast kernel: 32, 64 or 128 values per head (a head is a power-of-two group of lanes),
// 16-byte aligned input, q and rotary rows, and a half split whose quarters are whole 8-value
// chunks. Where K and V go is checked by the caller.
bool fast_kernel_fits(const SplitQkvArgs& a) {
  return (a.dim == 32 || a.dim == 64 || a.dim == 128) && aligned_to(a.qkv, 16) &&
         aligned_to(a.q, 16) && (!a.cos || (aligned_to(a.cos, 16) && aligned_to(a.sin, 16)));
}

}  // namespace

// The fast kernel's conditions, and destinations aligned for its 16-byte (8-byte for e4m3)
// stores.
bool split_qkv_direct_ok(const SplitQkvArgs& a) {
  if (!fast_kernel_fits(a) || a.direct_frames <= 0 ||
      a.direct_frames > SplitQkvArgs::kMaxDirectFrames || a.rows_per_frame <= 0 ||
      int64_t(a.direct_frames) * a.rows_per_frame != a.rows)
    return false;
  const int align = a.direct_f8 ? 8 : 16;
  for (int f = 0; f < a.direct_frames; ++f)
    if (!aligned_to(a.kd[f], align) || !aligned_to(a.vd[f], align) || (a.direct_f8 && !a.ds[f]))
      return false;
  return true;
}

void split_qkv(const SplitQkvArgs& a, cudaStream_t s) {
  LINGBOT_CHECK(a.dim > 0 && a.dim <= kMaxPerLane * 32,
                "split_qkv: head_dim " + std::to_string(a.dim) + " is above the CUDA limit 256");
  LINGBOT_CHECK(!a.cos || a.dim % (a.interleaved ? 2 : 4) == 0,
                "split_qkv: head_dim does not split into rotary pairs");
  const int64_t items = a.rows * 3 * a.heads;
  if (items <= 0) return;
  const int64_t blocks = (items + kWarps - 1) / kWarps;
  LINGBOT_CHECK(blocks <= 0x7fffffff, "split_qkv: too many rows for one launch");
  const bool direct = a.direct_frames > 0;
  LINGBOT_CHECK(!direct || split_qkv_direct_ok(a), "split_qkv: direct form out of its conditions");
  const bool fast = direct || (fast_kernel_fits(a) && aligned_to(a.k, 16) && aligned_to(a.v, 16));
  const int64_t fast_items = a.rows * 3;
  dispatch_elt(a.qkv_t, [&](auto iv) {
    using In = decltype(iv);
    dispatch_elt(a.out_t, [&](auto ov) {
      using Out = decltype(ov);
      const auto fast_blocks = static_cast<unsigned>((fast_items + kWarps - 1) / kWarps);
      if (fast && a.dim == 32)
        launch_kernel(split_qkv_fast_kernel<In, Out, 32>, fast_blocks, kWarps * 32, 0, s, a,
                      fast_items);
      else if (fast && a.dim == 64)
        launch_kernel(split_qkv_fast_kernel<In, Out, 64>, fast_blocks, kWarps * 32, 0, s, a,
                      fast_items);
      else if (fast && a.dim == 128)
        launch_kernel(split_qkv_fast_kernel<In, Out, 128>, fast_blocks, kWarps * 32, 0, s, a,
                      fast_items);
      else
        launch_kernel(split_qkv_kernel<In, Out>, static_cast<unsigned>(blocks), kWarps * 32, 0, s,
                      a, items);
    });
  });
}

}  // namespace lingbot::cuda
