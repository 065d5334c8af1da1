// Device-side helpers shared by the kernel files.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <utility>

#include "backend/cuda/common.h"

namespace lingbot::cuda {

// Programmatic dependent launch (Hopper and later). A kernel launched through launch_kernel() may
// be scheduled while the kernel before it on the stream is still finishing; before it touches
// global memory it calls await_inputs(), which returns once that kernel has completed and its
// writes are visible, and then lets the next kernel be scheduled in turn. What overlaps is a
// launch and the placing of CTAs, never the work: the gap between two dependent kernels of a
// recorded step, ~800 a step. The call must come before any return: a kernel whose CTAs all
// returned without waiting would count as complete before the kernel whose outputs it was to
// read, and so would every kernel after it (tests/unit/cuda_kernels_wait_test.cpp checks both).
__device__ __forceinline__ void await_inputs() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

// kernel<<<grid, block, smem, s>>>(args...) for kernels that start with await_inputs(); a bad
// configuration throws here.
template <class... Params, class... Args>
void launch_kernel(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t s,
                   Args&&... args) {
  cudaLaunchAttribute attr;
  attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr.val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = s;
  cfg.attrs = &attr;
  cfg.numAttrs = dependent_launch() ? 1 : 0;
  LB_CUDA(cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...));
}

__device__ __forceinline__ float to_f32(float v) {
  return v;
}
__device__ __forceinline__ float to_f32(__nv_bfloat16 v) {
  return __bfloat162float(v);
}
__device__ __forceinline__ float to_f32(__half v) {
  return __half2float(v);
}

template <class T>
__device__ __forceinline__ T from_f32(float v);
template <>
__device__ __forceinline__ float from_f32<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}
template <>
__device__ __forceinline__ __half from_f32<__half>(float v) {
  return __float2half_rn(v);
}

// N consecutive elements to or from fp32 registers in 8- or 16-byte accesses; the caller
// guarantees that p is aligned to min(16, N * sizeof(T)) bytes.
template <int N, class T>
__device__ __forceinline__ void load_vec(const T* __restrict__ p, float (&x)[N]) {
  constexpr int kBytes = N * int(sizeof(T)), kStep = kBytes >= 16 ? 16 : 8;
  static_assert(kBytes % 8 == 0, "load_vec: 8-byte multiples only");
  constexpr int kPer = kStep / int(sizeof(T));
#pragma unroll
  for (int v = 0; v < kBytes / kStep; ++v) {
    alignas(16) T e[kPer];
    if constexpr (kStep == 16)
      *reinterpret_cast<uint4*>(e) = reinterpret_cast<const uint4*>(p)[v];
    else
      *reinterpret_cast<uint2*>(e) = reinterpret_cast<const uint2*>(p)[v];
#pragma unroll
    for (int i = 0; i < kPer; ++i) x[v * kPer + i] = to_f32(e[i]);
  }
}
template <int N, class T>
__device__ __forceinline__ void store_vec(T* __restrict__ p, const float (&x)[N]) {
  constexpr int kBytes = N * int(sizeof(T)), kStep = kBytes >= 16 ? 16 : 8;
  static_assert(kBytes % 8 == 0, "store_vec: 8-byte multiples only");
  constexpr int kPer = kStep / int(sizeof(T));
#pragma unroll
  for (int v = 0; v < kBytes / kStep; ++v) {
    alignas(16) T e[kPer];
#pragma unroll
    for (int i = 0; i < kPer; ++i) e[i] = from_f32<T>(x[v * kPer + i]);
    if constexpr (kStep == 16)
      reinterpret_cast<uint4*>(p)[v] = *reinterpret_cast<const uint4*>(e);
    else
      reinterpret_cast<uint2*>(p)[v] = *reinterpret_cast<const uint2*>(e);
  }
}
inline bool aligned_to(const void* p, size_t bytes) {
  return reinterpret_cast<uintptr_t>(p) % bytes == 0;
}

// Loads element i of a vector whose dtype is only known at run time (uniform across the grid,
// so the branch costs nothing next to the memory access).
__device__ __forceinline__ float load_elt(const void* p, Elt t, int64_t i) {
  switch (t) {
    case kF32:
      return static_cast<const float*>(p)[i];
    case kBF16:
      return __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]);
    default:
      return __half2float(static_cast<const __half*>(p)[i]);
  }
}
__device__ __forceinline__ void store_elt(void* p, Elt t, int64_t i, float v) {
  switch (t) {
    case kF32:
      static_cast<float*>(p)[i] = v;
      break;
    case kBF16:
      static_cast<__nv_bfloat16*>(p)[i] = __float2bfloat16_rn(v);
      break;
    default:
      static_cast<__half*>(p)[i] = __float2half_rn(v);
      break;
  }
}

__device__ __forceinline__ float act_apply(float x, Act a) {
  switch (a) {
    case Act::None:
      return x;
    case Act::GELU:
      return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f));
    case Act::ReLU:
      return x > 0.f ? x : 0.f;
    case Act::SiLU:
      return x / (1.0f + expf(-x));
    case Act::Exp:
      return expf(x);
    case Act::ExpP1:
      return 1.0f + expf(x);
  }
  return x;
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Eight consecutive elements of a vector whose dtype is known at run time (16-byte aligned).
__device__ __forceinline__ void load8(const void* p, Elt t, int64_t i, float (&x)[8]) {
  switch (t) {
    case kF32:
      load_vec<8>(static_cast<const float*>(p) + i, x);
      break;
    case kBF16:
      load_vec<8>(static_cast<const __nv_bfloat16*>(p) + i, x);
      break;
    default:
      load_vec<8>(static_cast<const __half*>(p) + i, x);
      break;
  }
}

// LayerNorm of one row of 32 * kPer elements by one warp, as every kernel that normalizes such
// rows computes it, so that they agree to the bit: lane l holds elements 8 (32 c + l) + 0..7 of
// chunk c, read once in 16-byte pieces; the mean, then the centred variance, both warp sums.
template <int kPer, class X>
__device__ __forceinline__ void warp_row_stats(const X* row, float eps, float (&v)[kPer / 8][8],
                                               float& mean, float& rstd) {
  constexpr int kChunks = kPer / 8, kN = 32 * kPer;
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int c = 0; c < kChunks; ++c) load_vec<8>(row + 8 * (32 * c + lane), v[c]);
  float s = 0.f;
#pragma unroll
  for (int c = 0; c < kChunks; ++c)
#pragma unroll
    for (int k = 0; k < 8; ++k) s += v[c][k];
  mean = warp_sum(s) / static_cast<float>(kN);
  float q = 0.f;
#pragma unroll
  for (int c = 0; c < kChunks; ++c)
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      const float d = v[c][k] - mean;
      q += d * d;
    }
  rstd = rsqrtf(warp_sum(q) / static_cast<float>(kN) + eps);
}

// Elements i..i + 7 of a normalized row: (x - mean) * rstd, times the weight and plus the bias
// where given. Rounded operation by operation, never contracted into an fma, so that every kernel
// normalizing with it gets the same bits (those the LayerNorm kernel has always written).
__device__ __forceinline__ void normalize8(const float (&x)[8], float mean, float rstd,
                                           const void* w, Elt wt, const void* b, Elt bt, int64_t i,
                                           float (&o)[8]) {
  float g[8], h[8];
  if (w) load8(w, wt, i, g);
  if (b) load8(b, bt, i, h);
#pragma unroll
  for (int k = 0; k < 8; ++k) {
    o[k] = __fmul_rn(__fsub_rn(x[k], mean), rstd);
    if (w) o[k] = __fmul_rn(o[k], g[k]);
    if (b) o[k] = __fadd_rn(o[k], h[k]);
  }
}

// Sum over the block; every thread gets the result. `red` needs blockDim.x / 32 floats.
__device__ __forceinline__ float block_sum(float v, float* red) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
  v = warp_sum(v);
  __syncthreads();  // `red` may still be read by a previous reduction
  if (lane == 0) red[warp] = v;
  __syncthreads();
  float t = lane < nwarps ? red[lane] : 0.f;
  return warp_sum(t);
}

// Grid size for a grid-stride loop over n items.
inline unsigned grid_for(int64_t n, int threads, int64_t cap = 65535LL * 8) {
  int64_t b = (n + threads - 1) / threads;
  if (b < 1) b = 1;
  return static_cast<unsigned>(b < cap ? b : cap);
}

// Calls f(T{}) with T the C++ type of a run-time element type.
template <class F>
void dispatch_elt(Elt t, F&& f) {
  switch (t) {
    case kF32:
      f(float{});
      break;
    case kBF16:
      f(__nv_bfloat16{});
      break;
    case kF16:
      f(__half{});
      break;
  }
}

}  // namespace lingbot::cuda
