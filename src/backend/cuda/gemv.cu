// Linear layers over a few rows (the camera head's one token per frame): y = act(x . w^T + b)
// (+ y). At M <= 4 a GEMM reads each weight once and does almost no arithmetic with it, so the
// time is the weight's bytes; cuBLASLt's kernels for this shape reached ~0.6 TB/s with their
// conversion, bias and activation passes around them. Here one kernel streams the weight with
// 16-byte loads, several rows in flight per thread, and applies bias, activation and the
// residual in its epilogue.
#include <cstdlib>
#include <cstring>

#include "backend/cuda/device_utils.cuh"

namespace lingbot::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kRows = 4;  // output rows (of w) per block: that many 16-byte loads in flight

// Eight bf16 or four floats of a 16-byte load, as floats.
__device__ __forceinline__ void unpack(const uint4& v, float (&f)[8]) {
  const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&v);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 p = __bfloat1622float2(h[i]);
    f[2 * i] = p.x;
    f[2 * i + 1] = p.y;
  }
}
__device__ __forceinline__ void unpack(const uint4& v, float (&f)[4]) {
  f[0] = __uint_as_float(v.x);
  f[1] = __uint_as_float(v.y);
  f[2] = __uint_as_float(v.z);
  f[3] = __uint_as_float(v.w);
}

// An F32 input into bf16 weights is rounded to bf16 first, as the GEMM path converts it.
template <class W, class X, int E>
__device__ __forceinline__ void round_x(float (&f)[E]) {
  if constexpr (sizeof(W) == 2 && sizeof(X) == 4) {
#pragma unroll
    for (int i = 0; i < E; ++i) f[i] = __bfloat162float(__float2bfloat16_rn(f[i]));
  }
}

// E consecutive inputs as floats, as they are.
template <class X, int E>
__device__ __forceinline__ void load_x(const X* p, float (&f)[E]) {
  if constexpr (sizeof(X) == 4) {
#pragma unroll
    for (int i = 0; i < E; i += 4) {
      const float4 v = *reinterpret_cast<const float4*>(p + i);
      f[i] = v.x;
      f[i + 1] = v.y;
      f[i + 2] = v.z;
      f[i + 3] = v.w;
    }
  } else if constexpr (E == 8) {
    unpack(*reinterpret_cast<const uint4*>(p), f);
  } else {  // four bf16 inputs against four F32 weights: an 8-byte load
    const uint2 v = *reinterpret_cast<const uint2*>(p);
    const float2 a = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&v.x));
    const float2 b = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&v.y));
    f[0] = a.x;
    f[1] = a.y;
    f[2] = b.x;
    f[3] = b.y;
  }
}

struct GemvParams {
  const void* w;
  const void* x;
  const void* bias;
  void* y;
  int64_t k;
  int n, m;
  Elt bias_t, y_t;
  Act act;
  bool accumulate;
  RowNorm norm;  // with kNorm: x's rows are LayerNorm'd on the way in
};

// Block b computes rows [b * kRows, b * kRows + kRows) of w for all M rows of x; its threads
// split K in 16-byte chunks (one chunk per thread per row at K = 2048 bf16), then the block sums.
// X is F32 or BF16, W F32 or BF16; M is the number of input rows, 1..4. kNorm > 0 (F32 rows of
// K = 32 kNorm, bf16 weights): the input is LayerNorm(x) as the LayerNorm kernel writes it, its
// statistics found by the block's first M warps (warp_row_stats, a few KB of x per block), so
// the camera head's norms need no launch of their own.
template <class W, class X, int M, int kNorm>
__global__ void __launch_bounds__(kThreads) gemv_kernel(GemvParams p) {
  await_inputs();
  constexpr int E = 16 / sizeof(W);  // weights per 16-byte load
  static_assert(kNorm == 0 || (E == 8 && sizeof(X) == 4), "LayerNorm'd inputs: F32 into bf16");
  const W* w = static_cast<const W*>(p.w);
  const X* x = static_cast<const X*>(p.x);
  const int row0 = blockIdx.x * kRows;
  __shared__ float stats[M][2];
  if constexpr (kNorm > 0) {
    const int warp = threadIdx.x >> 5;
    if (warp < M) {
      float v[kNorm / 8][8], mean, rstd;
      warp_row_stats<kNorm>(x + warp * p.k, p.norm.eps, v, mean, rstd);
      if ((threadIdx.x & 31) == 0) {
        stats[warp][0] = mean;
        stats[warp][1] = rstd;
      }
    }
    __syncthreads();
  }
  const int64_t chunks = p.k / E;
  float acc[kRows][M];
#pragma unroll
  for (int r = 0; r < kRows; ++r)
#pragma unroll
    for (int i = 0; i < M; ++i) acc[r][i] = 0.f;

  for (int64_t c = threadIdx.x; c < chunks; c += kThreads) {
    uint4 wv[kRows];
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      // Weights are read once per call: stream them past L1 and mark them first to evict.
      wv[r] = row0 + r < p.n ? __ldcs(reinterpret_cast<const uint4*>(w + (row0 + r) * p.k) + c)
                             : make_uint4(0, 0, 0, 0);
    }
    float xv[M][E];
#pragma unroll
    for (int i = 0; i < M; ++i) {
      load_x<X, E>(x + i * p.k + c * E, xv[i]);
      if constexpr (kNorm > 0) {
        float raw[E];
#pragma unroll
        for (int e = 0; e < E; ++e) raw[e] = xv[i][e];
        normalize8(raw, stats[i][0], stats[i][1], p.norm.w, p.norm.wt, p.norm.b, p.norm.bt, c * E,
                   xv[i]);
      }
      round_x<W, X, E>(xv[i]);
    }
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      float wf[E];
      unpack(wv[r], wf);
#pragma unroll
      for (int i = 0; i < M; ++i)
#pragma unroll
        for (int e = 0; e < E; ++e) acc[r][i] = fmaf(wf[e], xv[i][e], acc[r][i]);
    }
  }

  __shared__ float red[kThreads / 32][kRows * M];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
  for (int r = 0; r < kRows; ++r)
#pragma unroll
    for (int i = 0; i < M; ++i) {
      const float v = warp_sum(acc[r][i]);
      if (lane == 0) red[warp][r * M + i] = v;
    }
  __syncthreads();
  const int t = threadIdx.x;
  if (t >= kRows * M) return;
  const int r = t / M, i = t % M, row = row0 + r;
  if (row >= p.n) return;
  float v = 0.f;
#pragma unroll
  for (int j = 0; j < kThreads / 32; ++j) v += red[j][t];
  if (p.bias) v += load_elt(p.bias, p.bias_t, row);
  v = act_apply(v, p.act);
  const int64_t o = static_cast<int64_t>(i) * p.n + row;
  if (p.accumulate) v += load_elt(p.y, p.y_t, o);
  store_elt(p.y, p.y_t, o, v);
}

template <class W, class X, int kNorm = 0>
void launch(const GemvParams& p, cudaStream_t s) {
  const unsigned grid = static_cast<unsigned>((p.n + kRows - 1) / kRows);
  switch (p.m) {
    case 1:
      launch_kernel(gemv_kernel<W, X, 1, kNorm>, grid, kThreads, 0, s, p);
      break;
    case 2:
      launch_kernel(gemv_kernel<W, X, 2, kNorm>, grid, kThreads, 0, s, p);
      break;
    case 3:
      launch_kernel(gemv_kernel<W, X, 3, kNorm>, grid, kThreads, 0, s, p);
      break;
    default:
      launch_kernel(gemv_kernel<W, X, 4, kNorm>, grid, kThreads, 0, s, p);
      break;
  }
}

bool aligned16(const void* p) {
  return (reinterpret_cast<uintptr_t>(p) & 15) == 0;
}

}  // namespace

bool gemv(const void* x, Elt xt, const void* w, Elt wt, const void* bias, Elt bt, void* y, Elt yt,
          int64_t m, int64_t n, int64_t k, Act act, bool accumulate, cudaStream_t s,
          const RowNorm* norm) {
  if (m < 1 || m > kGemvMaxRows || n < 1 || n > (1 << 30)) return false;
  if ((wt != kF32 && wt != kBF16) || (xt != kF32 && xt != kBF16)) return false;
  // Whole 16-byte loads of every row of w and x.
  const int64_t per_load = wt == kF32 ? 4 : 8;
  if (k % per_load != 0 || k % 8 != 0 || !aligned16(w) || !aligned16(x)) return false;
  GemvParams p{w, x, bias, y, k, static_cast<int>(n), static_cast<int>(m), bt, yt, act, accumulate};
  if (norm) {
    p.norm = *norm;
    // The LayerNorm kernel's rows: F32 of 1024 or 2048, its vectors 16-byte aligned.
    if (xt != kF32 || wt != kBF16 || (k != 1024 && k != 2048) || (norm->w && !aligned16(norm->w)) ||
        (norm->b && !aligned16(norm->b)))
      return false;
    k == 1024 ? launch<__nv_bfloat16, float, 32>(p, s) : launch<__nv_bfloat16, float, 64>(p, s);
    return true;
  }
  if (wt == kBF16)
    xt == kF32 ? launch<__nv_bfloat16, float>(p, s) : launch<__nv_bfloat16, __nv_bfloat16>(p, s);
  else
    xt == kF32 ? launch<float, float>(p, s) : launch<float, __nv_bfloat16>(p, s);
  return true;
}

}  // namespace lingbot::cuda
