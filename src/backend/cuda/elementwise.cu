// Memory-bound ops: dtype conversion, fill, bias/activation, LayerNorm, residual add, concat and
// transpose. Each is a few MB per call at our shapes, so launch count matters more than peak
// bandwidth; kernels are grid-stride and dtype-templated on the big tensors only.
#include <algorithm>

#include "backend/cuda/device_utils.cuh"

namespace lingbot::cuda {
namespace {

constexpr int kThreads = 256;

template <class S, class D>
__global__ void convert_kernel(const S* __restrict__ src, D* __restrict__ dst, int64_t n) {
  await_inputs();
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    dst[i] = from_f32<D>(to_f32(src[i]));
}

template <class T>
__global__ void fill_kernel(T* __restrict__ dst, int64_t n, float v) {
  await_inputs();
  const T tv = from_f32<T>(v);
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    dst[i] = tv;
}

// Ranges of one copy_ranges launch, passed by value as the kernel's parameters.
struct RangeBatch {
  static constexpr int kMax = 64;
  const char* src[kMax];
  char* dst[kMax];
  size_t bytes[kMax];
};

// Range blockIdx.y, split over gridDim.x blocks: 16 bytes a thread where both ends and the length
// allow it (the cache's rows always do), bytes otherwise.
__global__ void copy_ranges_kernel(RangeBatch b) {
  await_inputs();
  const int r = blockIdx.y;
  const char* src = b.src[r];
  char* dst = b.dst[r];
  const size_t n = b.bytes[r];
  const size_t first = blockIdx.x * size_t(blockDim.x) + threadIdx.x;
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  if (((reinterpret_cast<uintptr_t>(src) | reinterpret_cast<uintptr_t>(dst) | n) & 15) == 0) {
    const int4* s4 = reinterpret_cast<const int4*>(src);
    int4* d4 = reinterpret_cast<int4*>(dst);
    for (size_t i = first; i < n / 16; i += stride) d4[i] = s4[i];
  } else {
    for (size_t i = first; i < n; i += stride) dst[i] = src[i];
  }
}

// I: the index type. 32-bit when the tensor allows it: the modulo by the row length is a
// 64-bit division otherwise, which costs more than the memory traffic.
template <class T, class I>
__global__ void bias_act_kernel(T* __restrict__ y, const void* __restrict__ bias, Elt bt, I total,
                                I n, Act act) {
  await_inputs();
  for (I i = blockIdx.x * I(blockDim.x) + threadIdx.x; i < total; i += I(gridDim.x) * blockDim.x) {
    float v = to_f32(y[i]);
    if (bias) v += load_elt(bias, bt, i % n);
    y[i] = from_f32<T>(act_apply(v, act));
  }
}

// One block per row; two passes (mean, then centred variance) like the CPU reference, which
// keeps the variance exact for rows with a large mean. kPer > 0: the row fits in registers,
// kPer values per thread (thread t holds elements t, t + blockDim, ...), read from memory once;
// the loop form (kPer = 0) reads it three times (the re-reads hit L1/L2). Both sum in the same
// order.
template <class X, class Y, int kPer>
__global__ void layer_norm_kernel(const X* __restrict__ x, const void* __restrict__ w, Elt wt,
                                  const void* __restrict__ b, Elt bt, float eps, Y* __restrict__ y,
                                  int64_t n) {
  await_inputs();
  __shared__ float red[32];
  const X* row = x + blockIdx.x * n;
  Y* out = y + blockIdx.x * n;
  if constexpr (kPer > 0) {
    const int t = threadIdx.x, step = blockDim.x, m = static_cast<int>(n);
    float v[kPer];
#pragma unroll
    for (int k = 0; k < kPer; ++k) v[k] = t + k * step < m ? to_f32(row[t + k * step]) : 0.f;
    float s = 0.f;
#pragma unroll
    for (int k = 0; k < kPer; ++k)
      if (t + k * step < m) s += v[k];
    const float mean = block_sum(s, red) / static_cast<float>(n);
    float q = 0.f;
#pragma unroll
    for (int k = 0; k < kPer; ++k) {
      const float d = v[k] - mean;
      if (t + k * step < m) q += d * d;
    }
    const float r = rsqrtf(block_sum(q, red) / static_cast<float>(n) + eps);
#pragma unroll
    for (int k = 0; k < kPer; ++k) {
      const int i = t + k * step;
      if (i < m) {
        float o = (v[k] - mean) * r;
        if (w) o *= load_elt(w, wt, i);
        if (b) o += load_elt(b, bt, i);
        out[i] = from_f32<Y>(o);
      }
    }
  } else {
    float s = 0.f;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) s += to_f32(row[i]);
    const float mean = block_sum(s, red) / static_cast<float>(n);
    float v = 0.f;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
      const float d = to_f32(row[i]) - mean;
      v += d * d;
    }
    const float var = block_sum(v, red) / static_cast<float>(n);
    const float r = rsqrtf(var + eps);
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
      float o = (to_f32(row[i]) - mean) * r;
      if (w) o *= load_elt(w, wt, i);
      if (b) o += load_elt(b, bt, i);
      out[i] = from_f32<Y>(o);
    }
  }
}

// One warp per row of 32 * kPer elements (the transformer's 1024 and the heads' 2048), four rows
// a block: the row is read once in 16-byte pieces, both sums are warp shuffles, and no block
// barrier stands between the passes (warp_row_stats). Launch-bound rows of a few KB spend their
// time in those barriers in the block-per-row form.
template <class X, class Y, int kPer>
__global__ void __launch_bounds__(128)
    layer_norm_warp_kernel(const X* __restrict__ x, const void* __restrict__ w, Elt wt,
                           const void* __restrict__ b, Elt bt, float eps, Y* __restrict__ y,
                           int64_t rows) {
  await_inputs();
  constexpr int kChunks = kPer / 8, kN = 32 * kPer;
  const int64_t row = blockIdx.x * 4LL + (threadIdx.x >> 5);
  if (row >= rows) return;
  const int lane = threadIdx.x & 31;
  float v[kChunks][8], mean, rstd;
  warp_row_stats<kPer>(x + row * kN, eps, v, mean, rstd);
#pragma unroll
  for (int c = 0; c < kChunks; ++c) {
    const int64_t i = 8 * (32 * c + lane);
    float o[8];
    normalize8(v[c], mean, rstd, w, wt, b, bt, i, o);
    store_vec<8>(y + row * kN + i, o);
  }
}

template <class X, class Y, class I>
__global__ void add_kernel(X* __restrict__ x, const Y* __restrict__ y, I n, I ny,
                           const void* __restrict__ g, Elt gt, I c, float alpha) {
  await_inputs();
  for (I i = blockIdx.x * I(blockDim.x) + threadIdx.x; i < n; i += I(gridDim.x) * blockDim.x) {
    float v = to_f32(y[ny == n ? i : i % ny]);
    if (g) v *= load_elt(g, gt, i % c);
    // Same expression as the CPU reference so that alpha == 1 rounds identically.
    x[i] = from_f32<X>(to_f32(x[i]) + (alpha == 1.f ? v : alpha * v));
  }
}

template <class T>
__global__ void concat_kernel(const T* __restrict__ a, const T* __restrict__ b, T* __restrict__ y,
                              int64_t m, int64_t ca, int64_t cb) {
  await_inputs();
  const int64_t c = ca + cb, total = m * c;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t row = i / c, col = i % c;
    y[i] = col < ca ? a[row * ca + col] : b[row * cb + col - ca];
  }
}

// 32x32 tiles through shared memory so both the read and the write are coalesced.
template <class T>
__global__ void transpose_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t r, int64_t c) {
  await_inputs();
  __shared__ T tile[32][33];
  const int64_t bi = blockIdx.z;
  const T* src = x + bi * r * c;
  T* dst = y + bi * r * c;
  const int64_t c0 = int64_t(blockIdx.x) * 32, r0 = int64_t(blockIdx.y) * 32;
  for (int k = threadIdx.y; k < 32; k += blockDim.y) {
    const int64_t rr = r0 + k, cc = c0 + threadIdx.x;
    if (rr < r && cc < c) tile[k][threadIdx.x] = src[rr * c + cc];
  }
  __syncthreads();
  for (int k = threadIdx.y; k < 32; k += blockDim.y) {
    const int64_t cc = c0 + k, rr = r0 + threadIdx.x;
    if (rr < r && cc < c) dst[cc * r + rr] = tile[threadIdx.x][k];
  }
}

template <int Bytes>
struct Word;
template <>
struct Word<2> {
  using type = uint16_t;
};
template <>
struct Word<4> {
  using type = uint32_t;
};

}  // namespace

void convert(const void* src, Elt st, void* dst, Elt dt, int64_t n, cudaStream_t s) {
  if (n <= 0) return;
  if (st == dt) {
    const size_t bytes = static_cast<size_t>(n) * (st == kF32 ? 4 : 2);
    if (src != dst) LB_CUDA(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, s));
    return;
  }
  dispatch_elt(st, [&](auto sv) {
    using S = decltype(sv);
    dispatch_elt(dt, [&](auto dv) {
      using D = decltype(dv);
      launch_kernel(convert_kernel<S, D>, grid_for(n, kThreads), kThreads, 0, s,
                    static_cast<const S*>(src), static_cast<D*>(dst), n);
    });
  });
}

void fill(void* dst, Elt dt, int64_t n, float value, cudaStream_t s) {
  if (n <= 0) return;
  dispatch_elt(dt, [&](auto tv) {
    using T = decltype(tv);
    launch_kernel(fill_kernel<T>, grid_for(n, kThreads), kThreads, 0, s, static_cast<T*>(dst), n,
                  value);
  });
}

void copy_ranges(const ByteRange* ranges, size_t n, cudaStream_t s) {
  for (size_t at = 0; at < n; at += RangeBatch::kMax) {
    RangeBatch b{};
    const int count = static_cast<int>(std::min<size_t>(n - at, RangeBatch::kMax));
    size_t most = 0;
    for (int i = 0; i < count; ++i) {
      b.src[i] = static_cast<const char*>(ranges[at + i].src);
      b.dst[i] = static_cast<char*>(ranges[at + i].dst);
      b.bytes[i] = ranges[at + i].bytes;
      most = std::max(most, b.bytes[i]);
    }
    if (most == 0) continue;
    // A block moves 4 KB a pass; up to 64 blocks a range.
    const unsigned blocks = static_cast<unsigned>(std::min<size_t>((most + 4095) / 4096, 64));
    launch_kernel(copy_ranges_kernel, dim3(blocks, count), kThreads, 0, s, b);
  }
}

void bias_act(void* y, Elt yt, const void* bias, Elt bt, int64_t m, int64_t n, Act act,
              cudaStream_t s) {
  if (m * n <= 0 || (!bias && act == Act::None)) return;
  dispatch_elt(yt, [&](auto tv) {
    using T = decltype(tv);
    const unsigned grid = grid_for(m * n, kThreads);
    if (m * n < (int64_t(1) << 30))
      launch_kernel(bias_act_kernel<T, int32_t>, grid, kThreads, 0, s, static_cast<T*>(y), bias, bt,
                    static_cast<int32_t>(m * n), static_cast<int32_t>(n), act);
    else
      launch_kernel(bias_act_kernel<T, int64_t>, grid, kThreads, 0, s, static_cast<T*>(y), bias, bt,
                    m * n, n, act);
  });
}

void layer_norm(const void* x, Elt xt, const void* w, Elt wt, const void* b, Elt bt, float eps,
                void* y, Elt yt, int64_t rows, int64_t n, cudaStream_t s) {
  if (rows <= 0) return;
  LINGBOT_CHECK(rows <= 0x7fffffff, "layer_norm: too many rows for one launch");
  const int threads = n >= 1024 ? 256 : n >= 256 ? 128 : 64;
  dispatch_elt(xt, [&](auto xv) {
    using X = decltype(xv);
    dispatch_elt(yt, [&](auto yv) {
      using Y = decltype(yv);
      const auto* xp = static_cast<const X*>(x);
      auto* yp = static_cast<Y*>(y);
      const unsigned grid = static_cast<unsigned>(rows);
      const int64_t per = (n + threads - 1) / threads;  // values per thread
      const bool vec = aligned_to(x, 16) && aligned_to(y, 16) && (!w || aligned_to(w, 16)) &&
                       (!b || aligned_to(b, 16));
      const unsigned warp_grid = static_cast<unsigned>((rows + 3) / 4);
      if (vec && n == 1024)
        launch_kernel(layer_norm_warp_kernel<X, Y, 32>, warp_grid, 128, 0, s, xp, w, wt, b, bt, eps,
                      yp, rows);
      else if (vec && n == 2048)
        launch_kernel(layer_norm_warp_kernel<X, Y, 64>, warp_grid, 128, 0, s, xp, w, wt, b, bt, eps,
                      yp, rows);
      else if (per <= 4)
        launch_kernel(layer_norm_kernel<X, Y, 4>, grid, threads, 0, s, xp, w, wt, b, bt, eps, yp,
                      n);
      else if (per <= 8)
        launch_kernel(layer_norm_kernel<X, Y, 8>, grid, threads, 0, s, xp, w, wt, b, bt, eps, yp,
                      n);
      else
        launch_kernel(layer_norm_kernel<X, Y, 0>, grid, threads, 0, s, xp, w, wt, b, bt, eps, yp,
                      n);
    });
  });
}

void add(void* x, Elt xt, const void* y, Elt yt, int64_t n, int64_t ny, const void* gamma, Elt gt,
         int64_t c, float alpha, cudaStream_t s) {
  if (n <= 0) return;
  dispatch_elt(xt, [&](auto xv) {
    using X = decltype(xv);
    dispatch_elt(yt, [&](auto yv) {
      using Y = decltype(yv);
      const unsigned grid = grid_for(n, kThreads);
      if (n < (int64_t(1) << 30))
        launch_kernel(add_kernel<X, Y, int32_t>, grid, kThreads, 0, s, static_cast<X*>(x),
                      static_cast<const Y*>(y), static_cast<int32_t>(n), static_cast<int32_t>(ny),
                      gamma, gt, static_cast<int32_t>(c), alpha);
      else
        launch_kernel(add_kernel<X, Y, int64_t>, grid, kThreads, 0, s, static_cast<X*>(x),
                      static_cast<const Y*>(y), n, ny, gamma, gt, c, alpha);
    });
  });
}

void concat_last(const void* a, const void* b, void* y, int64_t m, int64_t ca, int64_t cb,
                 size_t elem, cudaStream_t s) {
  const int64_t total = m * (ca + cb);
  if (total <= 0) return;
  auto run = [&](auto tv) {
    using T = decltype(tv);
    launch_kernel(concat_kernel<T>, grid_for(total, kThreads), kThreads, 0, s,
                  static_cast<const T*>(a), static_cast<const T*>(b), static_cast<T*>(y), m, ca,
                  cb);
  };
  if (elem == 4)
    run(Word<4>::type{});
  else if (elem == 2)
    run(Word<2>::type{});
  else
    LINGBOT_CHECK(false, "concat_last: unsupported element size");
}

void transpose_last2(const void* x, void* y, int64_t batch, int64_t r, int64_t c, size_t elem,
                     cudaStream_t s) {
  if (batch * r * c <= 0) return;
  LINGBOT_CHECK(batch <= 65535 && (r + 31) / 32 <= 65535,
                "transpose_last2: shape too large for one launch");
  const dim3 grid(static_cast<unsigned>((c + 31) / 32), static_cast<unsigned>((r + 31) / 32),
                  static_cast<unsigned>(batch));
  const dim3 block(32, 8);
  auto run = [&](auto tv) {
    using T = decltype(tv);
    launch_kernel(transpose_kernel<T>, grid, block, 0, s, static_cast<const T*>(x),
                  static_cast<T*>(y), r, c);
  };
  if (elem == 4)
    run(Word<4>::type{});
  else if (elem == 2)
    run(Word<2>::type{});
  else
    LINGBOT_CHECK(false, "transpose_last2: unsupported element size");
}

}  // namespace lingbot::cuda
