// Image-side gathers and scatters around the GEMMs that do the convolutions' arithmetic:
// patchify, im2col, the transposed-conv scatter, and the bilinear resize.
#include <algorithm>

#include "backend/cuda/device_utils.cuh"

namespace lingbot::cuda {
namespace {

constexpr int kThreads = 256;

// One thread per output element, indexed in output order so the writes are coalesced.
template <class I, class R>
__global__ void patchify_kernel(const I* __restrict__ img, R* __restrict__ rows, int64_t c,
                                int64_t h, int64_t w, int p, int64_t total) {
  await_inputs();
  const int64_t gh = h / p, gw = w / p, kdim = c * p * p;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t col = i % kdim, patch = i / kdim;
    const int64_t kx = col % p, ky = (col / p) % p, ch = col / (int64_t(p) * p);
    const int64_t xg = patch % gw, yg = (patch / gw) % gh, f = patch / (gw * gh);
    rows[i] = from_f32<R>(to_f32(img[((f * c + ch) * h + yg * p + ky) * w + xg * p + kx]));
  }
}

__global__ void im2col_kernel(const float* __restrict__ x, float* __restrict__ cols, int64_t ci,
                              int64_t hi, int64_t wi, int64_t kh, int64_t kw, int stride, int pad,
                              int64_t wo, int64_t p0, int64_t np) {
  await_inputs();
  const int64_t total = ci * kh * kw * np;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t pix = p0 + i % np, kidx = i / np;
    const int64_t kx = kidx % kw, ky = (kidx / kw) % kh, c = kidx / (kw * kh);
    const int64_t oy = pix / wo, ox = pix % wo;
    const int64_t iy = oy * stride - pad + ky, ix = ox * stride - pad + kx;
    cols[i] = (iy >= 0 && iy < hi && ix >= 0 && ix < wi) ? x[(c * hi + iy) * wi + ix] : 0.f;
  }
}

// Grid (pixel blocks, channel, image): the channel comes from the block, not a division.
__global__ void channel_bias_kernel(float* __restrict__ y, const float* __restrict__ bias,
                                    int64_t pix) {
  await_inputs();
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i < pix) y[(int64_t(blockIdx.z) * gridDim.y + blockIdx.y) * pix + i] += bias[blockIdx.y];
}

__global__ void scatter_tconv_kernel(const float* __restrict__ tmp, const float* __restrict__ bias,
                                     float* __restrict__ y, int64_t co, int k, int64_t hi,
                                     int64_t wi) {
  await_inputs();
  const int64_t ho = hi * k, wo = wi * k, total = co * ho * wo, npix = hi * wi;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t ox = i % wo, oy = (i / wo) % ho, c = i / (wo * ho);
    const int64_t yy = oy / k, a = oy % k, xx = ox / k, b = ox % k;
    const float v = tmp[((c * k + a) * k + b) * npix + yy * wi + xx];
    y[i] = bias ? v + bias[c] : v;
  }
}

// align_corners: source = output * (in - 1) / (out - 1), the scale formed in float.
float resize_scale(int64_t in, int64_t out) {
  return out > 1 ? static_cast<float>(in - 1) / static_cast<float>(out - 1) : 0.f;
}

// The two rows an output row of an align_corners resize reads, and their weights. Mirrors the CPU
// reference's float arithmetic (scale formed in float, PyTorch's recipe).
struct SourceRows {
  const float *r0, *r1;
  float l0, l1;
};
__device__ __forceinline__ SourceRows source_rows(const float* plane, int oy, int hi, int wi,
                                                  float sh) {
  const float sy = __fmul_rn(sh, static_cast<float>(oy));
  const int y0 = static_cast<int>(sy), y1 = y0 + (y0 < hi - 1 ? 1 : 0);
  const float l1 = sy - static_cast<float>(y0);
  return {plane + int64_t(y0) * wi, plane + int64_t(y1) * wi, 1.f - l1, l1};
}
__device__ __forceinline__ float sample(const SourceRows& r, int ox, int wi, float sw) {
  const float sx = __fmul_rn(sw, static_cast<float>(ox));
  const int x0 = static_cast<int>(sx), x1 = x0 + (x0 < wi - 1 ? 1 : 0);
  const float w1 = sx - static_cast<float>(x0), w0 = 1.f - w1;
  return r.l0 * (w0 * r.r0[x0] + w1 * r.r0[x1]) + r.l1 * (w0 * r.r1[x0] + w1 * r.r1[x1]);
}

// Grid (columns, rows, planes): no per-element 64-bit division, which dominated at 378x504x128.
// Four consecutive outputs of a row per thread: its 16-byte store (and the addend's load) where
// the rows are whole multiples of four (kQuads), else one value at a time. `add` (or null) is
// added to output i of this launch as add[(add0 + i) % add_n].
template <bool kQuads>
__global__ void upsample_kernel(const float* __restrict__ x, float* __restrict__ y,
                                const float* __restrict__ add, int64_t add0, int64_t add_n, int hi,
                                int wi, int ho, int wo, float sh, float sw) {
  await_inputs();
  const int ox0 = 4 * (blockIdx.x * blockDim.x + threadIdx.x), oy = blockIdx.y;
  if (ox0 >= wo) return;
  const int64_t c = blockIdx.z;
  const SourceRows r = source_rows(x + c * hi * wi, oy, hi, wi, sh);
  const int64_t o = (c * ho + oy) * wo + ox0;
  float v[4];
#pragma unroll
  for (int j = 0; j < 4; ++j) v[j] = sample(r, min(ox0 + j, wo - 1), wi, sw);
  if constexpr (kQuads) {
    if (add) {
      const float4 a = *reinterpret_cast<const float4*>(add + (add0 + o) % add_n);
      v[0] += a.x;
      v[1] += a.y;
      v[2] += a.z;
      v[3] += a.w;
    }
    *reinterpret_cast<float4*>(y + o) = make_float4(v[0], v[1], v[2], v[3]);
  } else {
    for (int j = 0; j < 4 && ox0 + j < wo; ++j)
      y[o + j] = add ? v[j] + add[(add0 + o + j) % add_n] : v[j];
  }
}

// The same resize (and addend) written channels-last in bf16, as a convolution reads its input:
// x [images * c planes, hi, wi] -> y [images, ho, wo, c], each value that of upsample_kernel
// rounded once. A block is 32 outputs of a row x 32 channels (c a multiple of 32): a thread
// resizes four consecutive outputs of one channel (one pair of source rows; the addend, whole
// [ho, wo] planes repeated, as one 16-byte load where the rows are multiples of four), the block
// turns them around in shared memory, and a thread writes four channels of one output as one
// 8-byte store.
template <bool kQuads>
__global__ void __launch_bounds__(256)
    upsample_channels_last_kernel(const float* __restrict__ x, __nv_bfloat16* __restrict__ y,
                                  const float* __restrict__ add, int add_planes, int c, int hi,
                                  int wi, int ho, int wo, float sh, float sw) {
  await_inputs();
  __shared__ float tile[32][33];
  const int groups = c / 32, img = blockIdx.z / groups, c0 = (blockIdx.z - img * groups) * 32;
  const int ox0 = blockIdx.x * 32, oy = blockIdx.y, t = threadIdx.x;
  {
    const int ch = t >> 3, q = (t & 7) * 4;
    const int plane = img * c + c0 + ch;
    const SourceRows r = source_rows(x + int64_t(plane) * hi * wi, oy, hi, wi, sh);
    float v[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) v[j] = sample(r, min(ox0 + q + j, wo - 1), wi, sw);
    if (add && ox0 + q < wo) {
      const float* a = add + (int64_t(plane % add_planes) * ho + oy) * wo + ox0 + q;
      if constexpr (kQuads) {
        const float4 av = *reinterpret_cast<const float4*>(a);
        v[0] += av.x;
        v[1] += av.y;
        v[2] += av.z;
        v[3] += av.w;
      } else {
#pragma unroll
        for (int j = 0; j < 4; ++j)
          if (ox0 + q + j < wo) v[j] += a[j];
      }
    }
#pragma unroll
    for (int j = 0; j < 4; ++j) tile[ch][q + j] = v[j];
  }
  __syncthreads();
  const int px = t >> 3, k = (t & 7) * 4;
  if (ox0 + px < wo) {
    const __nv_bfloat162 lo = __floats2bfloat162_rn(tile[k][px], tile[k + 1][px]);
    const __nv_bfloat162 hi2 = __floats2bfloat162_rn(tile[k + 2][px], tile[k + 3][px]);
    uint2 out;
    out.x = *reinterpret_cast<const uint32_t*>(&lo);
    out.y = *reinterpret_cast<const uint32_t*>(&hi2);
    *reinterpret_cast<uint2*>(y + ((int64_t(img) * ho + oy) * wo + ox0 + px) * c + c0 + k) = out;
  }
}

}  // namespace

void patchify(const void* img, Elt it, void* rows, Elt rt, int64_t s, int64_t c, int64_t h,
              int64_t w, int p, cudaStream_t st) {
  const int64_t total = s * (h / p) * (w / p) * c * p * p;
  if (total <= 0) return;
  dispatch_elt(it, [&](auto iv) {
    using I = decltype(iv);
    dispatch_elt(rt, [&](auto rv) {
      using R = decltype(rv);
      launch_kernel(patchify_kernel<I, R>, grid_for(total, kThreads), kThreads, 0, st,
                    static_cast<const I*>(img), static_cast<R*>(rows), c, h, w, p, total);
    });
  });
}

void im2col(const float* x, float* cols, int64_t ci, int64_t hi, int64_t wi, int64_t kh, int64_t kw,
            int stride, int pad, int64_t wo, int64_t p0, int64_t p1, cudaStream_t s) {
  const int64_t total = ci * kh * kw * (p1 - p0);
  if (total <= 0) return;
  launch_kernel(im2col_kernel, grid_for(total, kThreads), kThreads, 0, s, x, cols, ci, hi, wi, kh,
                kw, stride, pad, wo, p0, p1 - p0);
}

void add_channel_bias(float* y, const float* bias, int64_t n, int64_t c, int64_t pix,
                      cudaStream_t s) {
  if (n * c * pix <= 0) return;
  const dim3 grid(static_cast<unsigned>((pix + kThreads - 1) / kThreads), static_cast<unsigned>(c),
                  static_cast<unsigned>(n));
  launch_kernel(channel_bias_kernel, grid, kThreads, 0, s, y, bias, pix);
}

void scatter_transpose_conv(const float* tmp, const float* bias, float* y, int64_t co, int k,
                            int64_t hi, int64_t wi, cudaStream_t s) {
  const int64_t total = co * hi * k * wi * k;
  if (total <= 0) return;
  launch_kernel(scatter_tconv_kernel, grid_for(total, kThreads), kThreads, 0, s, tmp, bias, y, co,
                k, hi, wi);
}

void upsample_bilinear(const float* x, float* y, int64_t nc, int64_t hi, int64_t wi, int64_t ho,
                       int64_t wo, const float* add, int64_t add_n, cudaStream_t s) {
  if (nc * ho * wo <= 0) return;
  const float sh = resize_scale(hi, ho), sw = resize_scale(wi, wo);
  // Quads need 16-byte aligned rows of y and of the addend (a whole number of rows of y).
  const bool quads = wo % 4 == 0 && reinterpret_cast<uintptr_t>(y) % 16 == 0 &&
                     (!add || (reinterpret_cast<uintptr_t>(add) % 16 == 0 && add_n % 4 == 0));
  // A block covers a row in whole warps, up to 512 outputs.
  const int row = static_cast<int>(std::min<int64_t>(128, ((wo + 3) / 4 + 31) / 32 * 32));
  for (int64_t c0 = 0; c0 < nc; c0 += 65535) {  // gridDim.z limit
    const int64_t planes = std::min<int64_t>(65535, nc - c0);
    const dim3 grid(static_cast<unsigned>((wo + 4 * row - 1) / (4 * row)),
                    static_cast<unsigned>(ho), static_cast<unsigned>(planes));
    // The planes of this launch start c0 planes into y, so the addend's index goes on from there.
    const int64_t an = add ? add_n : 1, a0 = (c0 * ho * wo) % an;
    auto* kernel = quads ? upsample_kernel<true> : upsample_kernel<false>;
    launch_kernel(kernel, grid, row, 0, s, x + c0 * hi * wi, y + c0 * ho * wo, add, a0, an,
                  static_cast<int>(hi), static_cast<int>(wi), static_cast<int>(ho),
                  static_cast<int>(wo), sh, sw);
  }
}

void upsample_channels_last(const float* x, void* y, int64_t images, int64_t c, int64_t hi,
                            int64_t wi, int64_t ho, int64_t wo, const float* add, int64_t add_n,
                            cudaStream_t s) {
  if (images * c * ho * wo <= 0) return;
  LINGBOT_CHECK(c % 32 == 0 && images * c <= 0x7fffffff && images * (c / 32) <= 65535 &&
                    ho <= 65535 && (!add || (add_n > 0 && add_n % (ho * wo) == 0)),
                "upsample_channels_last: unsupported shape");
  const dim3 grid(static_cast<unsigned>((wo + 31) / 32), static_cast<unsigned>(ho),
                  static_cast<unsigned>(images * (c / 32)));
  const bool quads = wo % 4 == 0 && reinterpret_cast<uintptr_t>(add) % 16 == 0;
  auto* kernel = quads ? upsample_channels_last_kernel<true> : upsample_channels_last_kernel<false>;
  launch_kernel(kernel, grid, 256, 0, s, x, static_cast<__nv_bfloat16*>(y), add,
                add ? static_cast<int>(add_n / (ho * wo)) : 1, static_cast<int>(c),
                static_cast<int>(hi), static_cast<int>(wi), static_cast<int>(ho),
                static_cast<int>(wo), resize_scale(hi, ho), resize_scale(wi, wo));
}

}  // namespace lingbot::cuda
