// Implicit-GEMM convolution on bf16 tensor cores: y[co, pixel] = sum over (tap, ci) of
// w[co, tap, ci] * x[pixel shifted by tap, ci], fp32 accumulation. No column buffer (9x the
// input, up to 0.9 GB at 378x504): each CTA copies its slice of the virtual im2col matrix
// straight from the input, rewritten channels-last in bf16 first (an upsampled input, the depth
// head's full-resolution stage, is written channels-last straight from the smaller image). Each
// K step, one tap and 32 consecutive channels of 128 pixels, is 16-byte rows that cp.async copies
// into a 4-stage ring, zero-filled at the borders.
// Tiling: 128 output pixels x BN output channels per CTA, 8 warps as 4 (pixels) x 2 (channels),
// mma.sync m16n8k16. Layers with too few tiles to fill the device split K over CTAs; one more
// pass adds the partial sums in a fixed order, so the result does not depend on scheduling.
// Weights are packed once per tensor by the caller ([co rounded up to 128][tap][ci], bf16).
// On Hopper the layers with input channels in multiples of 64 and more than 64 (or at most 32)
// outputs run a wgmma kernel instead (below): the same loads, 64 channels a K step, the products
// issued by warpgroups from shared memory. Timings: docs/perf-log/gpu-kernels.md.
#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "backend/cuda/device_utils.cuh"
#include "backend/cuda/mma.cuh"
#include "backend/cuda/wgmma.cuh"
#include "backend/scratch.h"
#include "backend/switches.h"

namespace lingbot::cuda {
namespace {

constexpr int kBM = 128, kBK = 32, kStages = 4, kThreads = 256;
constexpr int kPitch = kBK + 8;  // 80-byte rows: the 8 rows of an ldmatrix land on distinct banks
constexpr int kMaxSplits = 32;

struct KernelArgs {
  const __nv_bfloat16* x;  // [images, hi, wi, ci]
  const __nv_bfloat16* w;  // [co rounded up to 128, taps, ci]
  const float* bias;       // [co] or null; applied here only without a split
  float* out;              // y [images, co, ho*wo], or partials [splits, images, co, ho*wo]
  int ci, hi, wi, co, ho, wo, kh, kw, stride, pad, images, splits;
  int relu, accumulate;  // without a split only
};

template <int BN>
constexpr int smem_bytes() {
  return kStages * (kBM + BN) * kPitch * 2;
}

// w[co, ci, kh, kw] f32 -> packed[co_pad, kh * kw, ci] bf16, rows past co zero.
__global__ void pack_weights_kernel(const float* __restrict__ w, __nv_bfloat16* __restrict__ out,
                                    int co, int ci, int taps, int64_t total) {
  await_inputs();
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int c = static_cast<int>(i % ci);
    const int64_t rest = i / ci;
    const int tap = static_cast<int>(rest % taps), o = static_cast<int>(rest / taps);
    out[i] = __float2bfloat16_rn(o < co ? w[(int64_t(o) * ci + c) * taps + tap] : 0.f);
  }
}

// x[images, ci, hw] f32 -> [images, hw, ci] bf16 through 32 x 32 tiles (ci a multiple of 32).
__global__ void to_channels_last_kernel(const float* __restrict__ x,
                                        __nv_bfloat16* __restrict__ out, int ci, int hw) {
  await_inputs();
  __shared__ float tile[32][33];
  const int p0 = blockIdx.x * 32, c0 = blockIdx.y * 32, tx = threadIdx.x, ty = threadIdx.y;
  x += int64_t(blockIdx.z) * ci * hw;
  out += int64_t(blockIdx.z) * ci * hw;
#pragma unroll
  for (int j = 0; j < 32; j += 8) {
    const int p = p0 + tx;
    tile[ty + j][tx] = p < hw ? x[int64_t(c0 + ty + j) * hw + p] : 0.f;
  }
  __syncthreads();
#pragma unroll
  for (int j = 0; j < 32; j += 8) {
    const int p = p0 + ty + j;
    if (p < hw) out[int64_t(p) * ci + c0 + tx] = __float2bfloat16_rn(tile[tx][ty + j]);
  }
}

// The part of the work one CTA does: output pixels from m0 and channels from n0 of image `img`,
// the K steps [kt0, kt0 + nk) of its split.
struct Tile {
  int img, split, kt0, nk, m0, n0, npix;
};
template <int BN, int BK>
__device__ __forceinline__ Tile tile_of(const KernelArgs& a) {
  Tile t;
  const int ktiles = a.ci * a.kh * a.kw / BK;
  t.img = blockIdx.z / a.splits;
  t.split = blockIdx.z - t.img * a.splits;
  t.kt0 = static_cast<int>(int64_t(ktiles) * t.split / a.splits);
  t.nk = static_cast<int>(int64_t(ktiles) * (t.split + 1) / a.splits) - t.kt0;
  t.m0 = blockIdx.x * kBM;
  t.n0 = blockIdx.y * BN;
  t.npix = a.ho * a.wo;
  return t;
}

// Output pixel `pix` of a copying thread: the input position its window starts at, and whether
// it is a pixel at all (the last tile runs past the end).
struct PixelOrigin {
  int by = 0, bx = 0;
  bool ok = false;
};
__device__ __forceinline__ PixelOrigin origin_of(const KernelArgs& a, int pix, int npix) {
  PixelOrigin o;
  o.ok = pix < npix;
  const int oy = o.ok ? pix / a.wo : 0, ox = o.ok ? pix - oy * a.wo : 0;
  o.by = oy * a.stride - a.pad;
  o.bx = ox * a.stride - a.pad;
  return o;
}

// The 16 bytes at channel c of the input under tap (ky, kx) of such a pixel for cp.async: false
// where the window lies over the zero padding (then `src` is any valid address, never read).
__device__ __forceinline__ bool tap_source(const KernelArgs& a, const __nv_bfloat16* x,
                                           const PixelOrigin& o, int ky, int kx, int c,
                                           const __nv_bfloat16*& src) {
  const int iy = o.by + ky, ix = o.bx + kx;
  const bool ok = o.ok && iy >= 0 && iy < a.hi && ix >= 0 && ix < a.wi;
  src = ok ? x + (int64_t(iy) * a.wi + ix) * a.ci + c : a.x;
  return ok;
}

// Where a CTA's outputs go: y itself without a split, else its split's partial sums.
__device__ __forceinline__ float* out_plane0(const KernelArgs& a, const Tile& t) {
  return a.out + (int64_t(a.splits == 1 ? 0 : t.split) * a.images + t.img) * a.co * t.npix;
}

// One output: without a split the whole epilogue, with one the partial sum alone.
__device__ __forceinline__ void store_out(const KernelArgs& a, float* out, int npix, int p, int c,
                                          float v) {
  if (p >= npix || c >= a.co) return;
  float* dst = out + int64_t(c) * npix + p;
  if (a.splits == 1) {
    if (a.bias) v += a.bias[c];
    if (a.relu) v = fmaxf(v, 0.f);
    if (a.accumulate) v += *dst;
  }
  *dst = v;
}

template <int BN>
__global__ void __launch_bounds__(kThreads) conv_kernel(KernelArgs a) {
  await_inputs();
  constexpr int kWarpN = BN / 2, kNT = kWarpN / 8;              // channels and n8 tiles per warp
  constexpr int kAStage = kBM * kPitch, kBStage = BN * kPitch;  // bf16 elements per stage
  constexpr int kBRows = BN < 64 ? 1 : BN / 64;                 // weight rows per loader thread
  extern __shared__ __align__(16) unsigned char smem[];
  const uint32_t sA = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  const uint32_t sB = sA + kStages * kAStage * 2;

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int warp_m = warp & 3, warp_n = warp >> 2;
  const Tile tl = tile_of<BN, kBK>(a);
  const int K = a.ci * a.kh * a.kw, m0 = tl.m0, n0 = tl.n0;
  const __nv_bfloat16* x = a.x + int64_t(tl.img) * a.hi * a.wi * a.ci;

  // Each thread copies 16 bytes (8 channels, chunk `ch` of 4) of pixel rows `ar` and `ar + 64`,
  // and of weight rows `ar + 64 i`.
  const int ar = tid >> 2, ch = tid & 3;
  PixelOrigin org[2];
#pragma unroll
  for (int i = 0; i < 2; ++i) org[i] = origin_of(a, m0 + ar + 64 * i, tl.npix);
  const bool b_loader = ar < BN;

  auto load = [&](int kt, int stage) {
    const int k0 = kt * kBK, tap = k0 / a.ci, c0 = k0 - tap * a.ci;
    const int ky = tap / a.kw, kx = tap - ky * a.kw;
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const __nv_bfloat16* src;
      const bool ok = tap_source(a, x, org[i], ky, kx, c0 + ch * 8, src);
      cp_async16(sA + ((stage * kAStage + (ar + 64 * i) * kPitch + ch * 8) * 2), src, ok);
    }
    if (b_loader) {
#pragma unroll
      for (int i = 0; i < kBRows; ++i) {
        const int row = ar + 64 * i;
        cp_async16(sB + ((stage * kBStage + row * kPitch + ch * 8) * 2),
                   a.w + int64_t(n0 + row) * K + k0 + ch * 8, true);
      }
    }
  };

  const int kt0 = tl.kt0, nk = tl.nk;
  float acc[2][kNT][4] = {};
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < nk) load(kt0 + s, s);
    cp_async_commit();
  }
  for (int i = 0; i < nk; ++i) {
    cp_async_wait<kStages - 2>();  // step i has landed (for this thread) ...
    __syncthreads();               // ... for all, and step i - 1's stage is free again
    if (i + kStages - 1 < nk) load(kt0 + i + kStages - 1, (i + kStages - 1) % kStages);
    cp_async_commit();
    const uint32_t a_st = sA + (i % kStages) * kAStage * 2, b_st = sB + (i % kStages) * kBStage * 2;
#pragma unroll
    for (int kk = 0; kk < kBK; kk += 16) {
      uint32_t af[2][4];
#pragma unroll
      for (int mi = 0; mi < 2; ++mi) {
        const int row = warp_m * 32 + mi * 16 + (lane & 15), col = kk + (lane >> 4) * 8;
        ldmatrix_x4(a_st + (row * kPitch + col) * 2, af[mi][0], af[mi][1], af[mi][2], af[mi][3]);
      }
#pragma unroll
      for (int np = 0; np < kNT / 2; ++np) {
        const int row = warp_n * kWarpN + np * 16 + (lane & 7) + ((lane >> 4) & 1) * 8;
        const int col = kk + ((lane >> 3) & 1) * 8;
        uint32_t b0, b1, b2, b3;
        ldmatrix_x4(b_st + (row * kPitch + col) * 2, b0, b1, b2, b3);
#pragma unroll
        for (int mi = 0; mi < 2; ++mi) {
          mma_bf16(acc[mi][2 * np], af[mi], b0, b1);
          mma_bf16(acc[mi][2 * np + 1], af[mi], b2, b3);
        }
      }
    }
  }
  cp_async_wait<0>();

  float* out = out_plane0(a, tl);
  const int g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int mi = 0; mi < 2; ++mi)
#pragma unroll
    for (int ni = 0; ni < kNT; ++ni)
#pragma unroll
      for (int r = 0; r < 4; ++r)
        store_out(a, out, tl.npix, m0 + warp_m * 32 + mi * 16 + g + (r >> 1) * 8,
                  n0 + warp_n * kWarpN + ni * 8 + 2 * t + (r & 1), acc[mi][ni][r]);
}

// The same convolution on Hopper's warpgroup products. 128 pixels x BN (32, 128 or 256) output
// channels per CTA, two warpgroups of 64 pixels; a K step is one tap and 64 input channels, so
// every pixel and every output channel contributes one 128-byte row, which all 256 threads copy
// with cp.async straight into the 128-byte swizzle that wgmma reads. Each warpgroup keeps one
// product in flight while it issues the next, so a stage is refilled two steps after its use:
// of the ring's wg_stages() stages, all but two are loading while two are being multiplied.
constexpr int kWBK = 64;
template <int BN>
constexpr int wg_stages() {
  return BN == 256 ? 4 : BN == 128 ? 6 : 5;  // 32 wide: 100 KB, two CTAs a multiprocessor
}
template <int BN>
constexpr int wg_smem_bytes() {
  return wg_stages<BN>() * (kBM + BN) * kWBK * 2 + 1024;  // + alignment of the 1 KB atoms
}

template <int BN>
__global__ void __launch_bounds__(kThreads, BN == 32 ? 2 : 1) conv_wgmma_kernel(KernelArgs a) {
  await_inputs();
#ifdef LINGBOT_WGMMA_BODY
  // Products of up to 128 output channels each: kHalves of kNB channels.
  constexpr int kNB = BN < 128 ? BN : 128, kHalves = BN / kNB;
  constexpr int kS = wg_stages<BN>(), kAhead = kS - 2;
  constexpr uint32_t kAStage = kBM * 128, kBStage = BN * 128;  // bytes
  extern __shared__ unsigned char smem_raw[];
  const uint32_t sA = (static_cast<uint32_t>(__cvta_generic_to_shared(smem_raw)) + 1023u) & ~1023u;
  const uint32_t sB = sA + kS * kAStage;

  const int tid = threadIdx.x, wg = tid >> 7;
  const Tile tl = tile_of<BN, kWBK>(a);
  const int K = a.ci * a.kh * a.kw, m0 = tl.m0, n0 = tl.n0, kt0 = tl.kt0, nk = tl.nk;
  const int co_rows = (a.co + 127) / 128 * 128;  // rows of the packed weights
  const __nv_bfloat16* x = a.x + int64_t(tl.img) * a.hi * a.wi * a.ci;

  // Thread copies 16-byte chunk `ch` of rows r0 + 32 j (pixels, then output channels); rows
  // 32 apart share their place in the swizzle atom.
  const int ch = tid & 7, r0 = tid >> 3;
  const uint32_t dst0 = swz(r0, ch);
  PixelOrigin org[4];
#pragma unroll
  for (int j = 0; j < 4; ++j) org[j] = origin_of(a, m0 + r0 + 32 * j, tl.npix);
  auto load = [&](int kt, int stage) {
    const int k0 = kt * kWBK, tap = k0 / a.ci, c0 = k0 - tap * a.ci;
    const int ky = tap / a.kw, kx = tap - ky * a.kw;
    const uint32_t da = sA + stage * kAStage + dst0, db = sB + stage * kBStage + dst0;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const __nv_bfloat16* src;
      const bool ok = tap_source(a, x, org[j], ky, kx, c0 + ch * 8, src);
      cp_async16(da + j * 32 * 128, src, ok);
    }
#pragma unroll
    for (int j = 0; j < BN / 32; ++j) {
      const int row = n0 + r0 + 32 * j;
      const bool ok = row < co_rows;
      cp_async16(db + j * 32 * 128, ok ? a.w + int64_t(row) * K + k0 + ch * 8 : a.w, ok);
    }
  };

  float acc[kHalves][kNB / 2];
#pragma unroll
  for (int h = 0; h < kHalves; ++h)
#pragma unroll
    for (int i = 0; i < kNB / 2; ++i) acc[h][i] = 0.f;
#pragma unroll
  for (int s = 0; s < kAhead; ++s) {
    if (s < nk) load(kt0 + s, s);
    cp_async_commit();
  }
  for (int i = 0; i < nk; ++i) {
    cp_async_wait<kAhead - 1>();  // step i has landed (this thread's copies) ...
    fence_proxy_async();          // ... is visible to the products' async proxy ...
    __syncthreads();              // ... for every thread; and step i - 2's products are done
    if (i + kAhead < nk) load(kt0 + i + kAhead, (i + kAhead) % kS);
    cp_async_commit();
    const uint32_t a_st = sA + (i % kS) * kAStage + wg * 64 * 128, b_st = sB + (i % kS) * kBStage;
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kWBK / 16; ++kk) {
      const uint64_t da = desc_kmajor(a_st) + 2 * kk;
#pragma unroll
      for (int h = 0; h < kHalves; ++h)
        wgmma_ss(acc[h], da, desc_kmajor(b_st + h * kNB * 128) + 2 * kk, 1);
    }
    wgmma_commit();
    wgmma_wait<1>();
  }
  wgmma_wait<0>();
#pragma unroll
  for (int h = 0; h < kHalves; ++h) fence_regs(acc[h]);
  cp_async_wait<0>();

  // Accumulator i of thread (warp w, g = lane / 4, t = lane % 4) of a warpgroup: row
  // 16 w + g + 8 ((i / 2) % 2), column 8 (i / 4) + 2 t + i % 2 of its 64 x kNB product.
  float* out = out_plane0(a, tl);
  const int lane = tid & 31, w = (tid >> 5) & 3, g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int h = 0; h < kHalves; ++h)
#pragma unroll
    for (int i = 0; i < kNB / 2; ++i)
      store_out(a, out, tl.npix, m0 + wg * 64 + w * 16 + g + ((i >> 1) & 1) * 8,
                n0 + h * kNB + (i >> 2) * 8 + 2 * t + (i & 1), acc[h][i]);
#endif
}

// y = epilogue(sum of the splits' partials, in split order) + bias.
__global__ void sum_splits_kernel(const float* __restrict__ part, float* __restrict__ y,
                                  const float* __restrict__ bias, int splits, int64_t n, int co,
                                  int npix, int relu, int accumulate) {
  await_inputs();
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    float v = part[i];
    for (int s = 1; s < splits; ++s) v += part[s * n + i];
    if (bias) v += bias[(i / npix) % co];
    if (relu) v = fmaxf(v, 0.f);
    if (accumulate) v += y[i];
    y[i] = v;
  }
}

}  // namespace

ConvPlan conv_plan(const ConvArgs& a, int sms, bool sm90a) {
  ConvPlan p;
  const int64_t npix = int64_t(a.ho) * a.wo, tiles_m = (npix + kBM - 1) / kBM;
  // Looked at per call: tests switch them. LINGBOT_CONV_WGMMA=0 keeps the mma.sync kernel; a
  // forced width of 64 is that kernel's, 32 either's (the wgmma kernel's for at most 32 outputs),
  // 128 either's, 256 the wgmma kernel's. Layers of at most 32 outputs take the 32-wide wgmma tile.
  const BackendSwitches& sw = switches();
  const int forced = sw.conv_bn;
  p.wgmma = sm90a && a.ci % kWBK == 0 && (a.co > 64 || a.co <= 32) && forced != 64 &&
            !(forced == 32 && a.co > 32) && sw.conv_wgmma;
  if (p.wgmma) {
    p.bn = a.co <= 32 ? 32 : forced == 128 || forced == 256 ? forced : a.co > 128 ? 256 : 128;
  } else {
    p.bn = a.co > 64 ? 128 : a.co > 32 ? 64 : 32;
    if (forced == 32 || forced == 64 || forced == 128) p.bn = forced;
  }
  p.input_bytes = (size_t(a.images) * a.hi * a.wi * a.ci * 2 + 255) / 256 * 256;
  // Split K where the tiles leave multiprocessors idle, keeping >= 4 K steps per split and the
  // partials within the im2col budget the memory preflight plans for this convolution.
  const int64_t ctas = tiles_m * ((a.co + p.bn - 1) / p.bn) * a.images;
  const int64_t ktiles = int64_t(a.ci) * a.kh * a.kw / (p.wgmma ? kWBK : kBK);
  const int64_t kdim = int64_t(a.ci) * a.kh * a.kw;
  const int64_t budget = int64_t(a.images) * kdim * scratch::im2col_chunk_pixels(kdim, npix) * 4 -
                         static_cast<int64_t>(p.input_bytes);
  const int64_t per_split = int64_t(a.images) * a.co * npix * 4;
  // The wgmma kernel's shared memory holds one CTA per multiprocessor (two at 32 wide): split
  // only as far as the splits still run in one wave (122 tiles stay whole; a second, part-filled
  // wave plus the partials' pass cost more than the idle tenth). The mma.sync kernel fits two per
  // multiprocessor and splits until the tiles cover them once.
  const int64_t per_wave = p.wgmma && p.bn == 32 ? 2 * sms : sms;
  int64_t splits = ctas >= per_wave ? 1 : p.wgmma ? per_wave / ctas : (sms + ctas - 1) / ctas;
  splits = std::min<int64_t>({splits, ktiles / 4, kMaxSplits, budget / per_split});
  if (sw.conv_splits)  // tests force splitting
    splits = std::min<int64_t>({sw.conv_splits, ktiles, budget / per_split});
  p.splits = static_cast<int>(std::max<int64_t>(1, splits));
  if (p.splits > 1) p.partial_bytes = size_t(p.splits) * per_split;
  return p;
}

namespace {

template <int BN>
void launch(const KernelArgs& k, dim3 grid, cudaStream_t s) {
  constexpr int smem = smem_bytes<BN>();
  LB_CUDA(cudaFuncSetAttribute(conv_kernel<BN>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  launch_kernel(conv_kernel<BN>, grid, kThreads, smem, s, k);
}
template <int BN>
void launch_wgmma(const KernelArgs& k, dim3 grid, cudaStream_t s) {
  constexpr int smem = wg_smem_bytes<BN>();
  LB_CUDA(cudaFuncSetAttribute(conv_wgmma_kernel<BN>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                               smem));
  launch_kernel(conv_wgmma_kernel<BN>, grid, kThreads, smem, s, k);
}

}  // namespace

static_assert(kBK == 32, "scratch::conv_packs admits input channels in multiples of 32");

void conv_pack_weights(const float* w, void* packed, int64_t co, int64_t ci, int64_t kh, int64_t kw,
                       cudaStream_t s) {
  const int64_t total = scratch::conv_packed_layout_elems(co, ci, kh * kw);
  launch_kernel(pack_weights_kernel, grid_for(total, 256), 256, 0, s, w,
                static_cast<__nv_bfloat16*>(packed), static_cast<int>(co), static_cast<int>(ci),
                static_cast<int>(kh * kw), total);
}

void conv2d_bf16(const ConvArgs& a, const ConvPlan& p, void* scratch, cudaStream_t s) {
  auto* xc = static_cast<__nv_bfloat16*>(scratch);
  const int hw = a.hi * a.wi, npix = a.ho * a.wo;
  if (a.up_h > 0)
    upsample_channels_last(a.x, xc, a.images, a.ci, a.up_h, a.up_w, a.hi, a.wi, a.add, a.add_n, s);
  else
    launch_kernel(to_channels_last_kernel, dim3((hw + 31) / 32, a.ci / 32, a.images), dim3(32, 8),
                  0, s, a.x, xc, a.ci, hw);

  KernelArgs k;
  k.x = xc;
  k.w = static_cast<const __nv_bfloat16*>(a.w);
  k.bias = a.bias;
  k.out =
      p.splits > 1 ? reinterpret_cast<float*>(static_cast<char*>(scratch) + p.input_bytes) : a.y;
  k.ci = a.ci;
  k.hi = a.hi;
  k.wi = a.wi;
  k.co = a.co;
  k.ho = a.ho;
  k.wo = a.wo;
  k.kh = a.kh;
  k.kw = a.kw;
  k.stride = a.stride;
  k.pad = a.pad;
  k.images = a.images;
  k.splits = p.splits;
  k.relu = a.relu;
  k.accumulate = a.accumulate;
  const dim3 grid((npix + kBM - 1) / kBM, (a.co + p.bn - 1) / p.bn, a.images * p.splits);
  if (p.wgmma && p.bn == 256)
    launch_wgmma<256>(k, grid, s);
  else if (p.wgmma && p.bn == 128)
    launch_wgmma<128>(k, grid, s);
  else if (p.wgmma)
    launch_wgmma<32>(k, grid, s);
  else if (p.bn == 128)
    launch<128>(k, grid, s);
  else if (p.bn == 64)
    launch<64>(k, grid, s);
  else
    launch<32>(k, grid, s);
  if (p.splits > 1) {
    const int64_t n = int64_t(a.images) * a.co * npix;
    launch_kernel(sum_splits_kernel, grid_for(n, 256), 256, 0, s, k.out, a.y, a.bias, p.splits, n,
                  a.co, npix, a.relu, a.accumulate);
  }
}

}  // namespace lingbot::cuda
