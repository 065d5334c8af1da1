// Implicit-GEMM convolution on bf16 tensor cores: y[co, pixel] = sum over (tap, ci) of
// w[co, tap, ci] * x[ci, pixel shifted by tap], fp32 accumulation. No column buffer: each CTA
// gathers its slice of the virtual im2col matrix straight from the NCHW input, rounding to bf16
// on the way into shared memory. This replaces im2col + GEMM for the depth head's 3x3
// convolutions, where the column buffer (9x the input, up to 0.9 GB at 378x504) and its
// integer-heavy gather cost far more than the arithmetic.
//
// Tiling: 128 output pixels x BN output channels per CTA, K in steps of 32 (one tap, 32
// consecutive input channels, so ci must be a multiple of 32), 8 warps as 4 (pixels) x 2
// (channels). The next K step's global loads are in registers while the current one runs.
// The gather of the input tile (scalar loads, a bf16 rounding each) costs more than its
// products; BN = 128 halves the gathers per product where the layer has enough pixels to keep
// every multiprocessor busy with the wider tiles.
#include <cstdlib>

#include "backend/cuda/device_utils.cuh"
#include "backend/cuda/mma.cuh"

namespace lingbot::cuda {
namespace {

constexpr int kBM = 128, kBK = 32, kThreads = 256;
constexpr int kApitch = kBM + 8;  // +16 bytes per row: ldmatrix rows land on distinct banks
constexpr int kBpitch = kBK + 8;

// w[co, ci, kh, kw] f32 -> packed[co_pad, kh * kw, ci] bf16, rows past co zero.
__global__ void pack_weights_kernel(const float* __restrict__ w, __nv_bfloat16* __restrict__ out,
                                    int co, int ci, int taps, int64_t total) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int c = static_cast<int>(i % ci);
    const int64_t rest = i / ci;
    const int tap = static_cast<int>(rest % taps), o = static_cast<int>(rest / taps);
    out[i] = __float2bfloat16_rn(o < co ? w[(int64_t(o) * ci + c) * taps + tap] : 0.f);
  }
}

template <int BN>
__global__ void __launch_bounds__(kThreads) conv_kernel(ConvArgs a) {
  constexpr int kWarpN = BN / 2, kNT = kWarpN / 8;  // channels and n8 tiles per warp
  __shared__ __align__(16) __nv_bfloat16 sA[2][kBK][kApitch];
  __shared__ __align__(16) __nv_bfloat16 sB[2][BN][kBpitch];

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int warp_m = warp & 3, warp_n = warp >> 2;
  const int npix = a.ho * a.wo, hw = a.hi * a.wi, taps = a.kh * a.kw;
  const int K = a.ci * taps, ktiles = K / kBK;
  const int m0 = blockIdx.x * kBM, n0 = blockIdx.y * BN;
  const float* x = a.x + int64_t(blockIdx.z) * a.ci * hw;

  // Each thread gathers one pixel's values for 16 of the 32 channels of a K step.
  const int am = tid & (kBM - 1), ak = tid >> 7;
  const int pix = m0 + am;
  const bool pix_ok = pix < npix;
  const int oy = pix_ok ? pix / a.wo : 0, ox = pix_ok ? pix - (pix / a.wo) * a.wo : 0;
  const int by = oy * a.stride - a.pad, bx = ox * a.stride - a.pad;
  // And one 16-byte chunk of every 64th row of the weight tile (BN rows x 4 chunks).
  constexpr int kBRows = BN < 64 ? 1 : BN / 64;
  const int bn = tid >> 2, bc = tid & 3;
  const bool b_loader = bn < BN;

  float areg[16];
  uint4 breg[kBRows];
  auto load = [&](int kt) {
    const int k0 = kt * kBK, tap = k0 / a.ci, c0 = k0 - tap * a.ci;
    const int ky = tap / a.kw, kx = tap - ky * a.kw;
    const int iy = by + ky, ix = bx + kx;
    const bool ok = pix_ok && iy >= 0 && iy < a.hi && ix >= 0 && ix < a.wi;
    const float* src = x + int64_t(c0 + ak) * hw + (ok ? iy * a.wi + ix : 0);
#pragma unroll
    for (int j = 0; j < 16; ++j) areg[j] = ok ? __ldg(src + int64_t(2 * j) * hw) : 0.f;
    if (b_loader) {
#pragma unroll
      for (int i = 0; i < kBRows; ++i)
        breg[i] = __ldg(reinterpret_cast<const uint4*>(
            static_cast<const __nv_bfloat16*>(a.w) + int64_t(n0 + bn + 64 * i) * K + k0 + bc * 8));
    }
  };
  auto store = [&](int buf) {
#pragma unroll
    for (int j = 0; j < 16; ++j) sA[buf][ak + 2 * j][am] = __float2bfloat16_rn(areg[j]);
    if (b_loader) {
#pragma unroll
      for (int i = 0; i < kBRows; ++i)
        *reinterpret_cast<uint4*>(&sB[buf][bn + 64 * i][bc * 8]) = breg[i];
    }
  };

  float acc[2][kNT][4] = {};
  load(0);
  store(0);
  __syncthreads();
  for (int kt = 0; kt < ktiles; ++kt) {
    const int buf = kt & 1;
    if (kt + 1 < ktiles) load(kt + 1);
#pragma unroll
    for (int kk = 0; kk < kBK; kk += 16) {
      uint32_t af[2][4];
#pragma unroll
      for (int mi = 0; mi < 2; ++mi) {
        // A is stored k-major, so .trans hands out the row-major fragment.
        const int row = kk + (lane & 7) + ((lane >> 4) & 1) * 8;
        const int col = warp_m * 32 + mi * 16 + ((lane >> 3) & 1) * 8;
        ldmatrix_x4_trans(static_cast<uint32_t>(__cvta_generic_to_shared(&sA[buf][row][col])),
                          af[mi][0], af[mi][1], af[mi][2], af[mi][3]);
      }
#pragma unroll
      for (int np = 0; np < kNT / 2; ++np) {
        const int row = warp_n * kWarpN + np * 16 + (lane & 7) + ((lane >> 4) & 1) * 8;
        const int col = kk + ((lane >> 3) & 1) * 8;
        uint32_t b0, b1, b2, b3;
        ldmatrix_x4(static_cast<uint32_t>(__cvta_generic_to_shared(&sB[buf][row][col])), b0, b1, b2,
                    b3);
#pragma unroll
        for (int mi = 0; mi < 2; ++mi) {
          mma_bf16(acc[mi][2 * np], af[mi], b0, b1);
          mma_bf16(acc[mi][2 * np + 1], af[mi], b2, b3);
        }
      }
    }
    if (kt + 1 < ktiles) store(buf ^ 1);
    __syncthreads();
  }

  float* y = a.y + int64_t(blockIdx.z) * a.co * npix;
  const int g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int mi = 0; mi < 2; ++mi) {
#pragma unroll
    for (int ni = 0; ni < kNT; ++ni) {
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        const int p = m0 + warp_m * 32 + mi * 16 + g + (r >> 1) * 8;
        const int c = n0 + warp_n * kWarpN + ni * 8 + 2 * t + (r & 1);
        if (p >= npix || c >= a.co) continue;
        float v = acc[mi][ni][r] + (a.bias ? a.bias[c] : 0.f);
        if (a.relu) v = fmaxf(v, 0.f);
        y[int64_t(c) * npix + p] = v;
      }
    }
  }
}

}  // namespace

bool conv_supported(int64_t ci, int64_t kh, int64_t kw) {
  return ci > 0 && ci % kBK == 0 && kh * kw > 0;
}

size_t conv_packed_bytes(int64_t co, int64_t ci, int64_t kh, int64_t kw) {
  return static_cast<size_t>((co + 127) / 128 * 128 * ci * kh * kw) * 2;  // room for any BN
}

void conv2d_bf16(ConvArgs a, const float* w_f32, void* packed, int images, int sms,
                 cudaStream_t s) {
  const int64_t tiles_m = (int64_t(a.ho) * a.wo + kBM - 1) / kBM;
  int bn = a.co > 32 ? 64 : 32;
  // Wider tiles only where there are enough of them for every multiprocessor.
  if (a.co >= 128 && tiles_m * ((a.co + 127) / 128) * images >= sms) bn = 128;
  const char* env = std::getenv("LINGBOT_CONV_BN");  // read per call: tests switch it
  const int forced = env && *env ? std::atoi(env) : 0;
  if (forced == 32 || forced == 64 || forced == 128) bn = forced;
  const int co_pad = (a.co + bn - 1) / bn * bn, taps = a.kh * a.kw;
  const int64_t total = int64_t(co_pad) * taps * a.ci;
  pack_weights_kernel<<<grid_for(total, 256), 256, 0, s>>>(
      w_f32, static_cast<__nv_bfloat16*>(packed), a.co, a.ci, taps, total);
  LB_CUDA_LAUNCHED();
  a.w = packed;
  const dim3 grid((a.ho * a.wo + kBM - 1) / kBM, co_pad / bn, images);
  if (bn == 128)
    conv_kernel<128><<<grid, kThreads, 0, s>>>(a);
  else if (bn == 64)
    conv_kernel<64><<<grid, kThreads, 0, s>>>(a);
  else
    conv_kernel<32><<<grid, kThreads, 0, s>>>(a);
  LB_CUDA_LAUNCHED();
}

}  // namespace lingbot::cuda
