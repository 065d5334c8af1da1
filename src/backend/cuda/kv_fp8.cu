// The fp8 KV cache's writes: per-head scales from the first rows a layer stores, and rows
// rounded to e4m3 (value / scale, nearest even, saturating at 448). The CPU backend computes
// both the same way, bit for bit: the scale is fp8_scale(amax) of a max, the division is IEEE,
// and one rounding to e4m3 follows.
#include <cuda_fp8.h>

#include "backend/cuda/device_utils.cuh"

namespace lingbot::cuda {
namespace {

constexpr int kScaleThreads = 256;

// One CTA per (K or V, head): the largest |value| over every row.
__global__ void __launch_bounds__(kScaleThreads)
    kv_scales_kernel(const void* k, const void* v, Elt t, int64_t rows, int heads, int dim,
                     float* scales) {
  await_inputs();
  const int which = blockIdx.x / heads, h = blockIdx.x % heads;
  const void* src = which == 0 ? k : v;
  float amax = 0.f;
  const int64_t n = rows * dim;
  for (int64_t i = threadIdx.x; i < n; i += kScaleThreads) {
    const int64_t r = i / dim, e = i % dim;
    amax = fmaxf(amax, fabsf(load_elt(src, t, (r * heads + h) * dim + e)));
  }
  __shared__ float part[kScaleThreads / 32];
  for (int off = 16; off > 0; off >>= 1)
    amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, off));
  if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = amax;
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < kScaleThreads / 32; ++w) amax = fmaxf(amax, part[w]);
    scales[which * heads + h] = fp8_scale(amax);
  }
}

// One CTA per row of heads * dim values, 32-bit index math within the row (a 64-bit division
// per element cost more than the conversion).
__global__ void quantize_kernel(const void* src, Elt t, uint8_t* dst, unsigned row, unsigned dim,
                                const float* scales) {
  await_inputs();
  const int64_t base = int64_t(blockIdx.x) * row;
  for (unsigned e = threadIdx.x; e < row; e += blockDim.x) {
    const float x = __fdiv_rn(load_elt(src, t, base + e), scales[e / dim]);
    dst[base + e] = static_cast<uint8_t>(__nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3));
  }
}

}  // namespace

void fp8_kv_scales(const void* k, const void* v, Elt t, int64_t rows, int heads, int dim,
                   float* scales, cudaStream_t s) {
  launch_kernel(kv_scales_kernel, 2 * heads, kScaleThreads, 0, s, k, v, t, rows, heads, dim,
                scales);
}

void quantize_fp8(const void* src, Elt t, void* dst, int64_t n, int heads, int dim,
                  const float* scales, cudaStream_t s) {
  if (n == 0) return;
  const int64_t row = int64_t(heads) * dim, rows = n / row;
  LINGBOT_CHECK(rows * row == n && row <= (int64_t(1) << 24) && rows < (int64_t(1) << 31),
                "quantize_fp8: bad row geometry");
  launch_kernel(quantize_kernel, static_cast<unsigned>(rows), 256, 0, s, src, t,
                static_cast<uint8_t*>(dst), static_cast<unsigned>(row), static_cast<unsigned>(dim),
                scales);
}

}  // namespace lingbot::cuda
