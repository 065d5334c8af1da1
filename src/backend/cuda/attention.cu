// Paged attention: out[q, h] = softmax(q . K^T * scale) . V over the keys of every segment, read
// in place through a small device table of segment pointers (no gather copy). Grid: (query
// tiles, heads, key splits); each CTA streams one key range of one head with an online softmax,
// and with more than one split a merge kernel combines the CTAs' fp32 partial outputs by their
// log-sum-exp. Splitting the keys fills the chip where ~1000 queries x 16 heads make few CTAs.
// Three kernels:
//  * mma: head_dim 64, bf16 q/K/V. Tensor cores through mma.sync m16n8k16 (sm_80+), K/V tiles of
//    64 keys double-buffered in shared memory with cp.async, swizzled so ldmatrix is conflict-free.
//    Each warp owns 16 query rows; P stays in registers between the two products. With e4m3 K/V
//    (the fp8 KV cache) the stored bytes go to a raw ring and each thread widens the chunks it
//    copied into the bf16 tiles (every e4m3 value is exact in bf16), so the products and the
//    softmax are the bf16 kernel's; the per-head scales fold into the score scale and the output.
//  * rows: up to 8 queries, head_dim 64 (f32), 128 or 256, f32 or bf16: the camera head's one
//    query per frame against every cached frame, a bandwidth-bound stream of whole rows.
//  * generic: any head_dim <= 256, f32 or bf16, one warp per query, fp32 CUDA cores. Used for the
//    float32 mode and what the other two do not take.
// On compute capability 9.0 (unless the backend runs the portable path) the bf16 head_dim-64 case
// goes to the wgmma kernel of attention_wgmma.cu instead (LINGBOT_ATTN_IMPL=mma forces mma).
#include <cuda_fp8.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "backend/cuda/attention_common.cuh"
#include "backend/cuda/mma.cuh"

namespace lingbot::cuda {
namespace {

using namespace attn;

// ------------------------------------------------------------------------------------------------
// Tensor-core kernel, head_dim 64, bf16.

constexpr int kD = 64;
constexpr int kBN = 64;               // keys per tile
constexpr int kChunks = kD * 2 / 16;  // 16-byte chunks per row (8)
constexpr int kF8Chunks = kD / 16;    // 16-byte chunks per stored e4m3 row (4)

template <int kWarps, bool kF8>
constexpr int mma_smem_bytes() {
  // Q tile + 2 stages of K and V in bf16 (+ 2 stages of the stored e4m3 K and V).
  return (16 * kWarps + 4 * kBN) * kD * 2 + (kF8 ? 4 * kBN * kD : 0);
}

// Two e4m3 values (the low byte first) as two bf16, exactly: e4m3 -> f16 is exact (the
// conversion instruction from sm_89 on, emulated before), and so is f16 -> f32 -> bf16 for every
// value e4m3 can hold (at most 4 significant bits, exponents 2^-9 to 2^8).
__device__ __forceinline__ uint32_t e4m3x2_to_bf16x2(uint32_t two) {
  const __half2_raw h =
      __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(two & 0xffffu), __NV_E4M3);
  const float2 f = __half22float2(__half2(h));
  return pack_bf16(f.x, f.y);
}
// 16 e4m3 bytes as 16 bf16 values: the first 8 in `lo`, the next 8 in `hi`.
__device__ __forceinline__ void widen_e4m3x16(const uint4 raw, uint4& lo, uint4& hi) {
  lo = make_uint4(e4m3x2_to_bf16x2(raw.x), e4m3x2_to_bf16x2(raw.x >> 16), e4m3x2_to_bf16x2(raw.y),
                  e4m3x2_to_bf16x2(raw.y >> 16));
  hi = make_uint4(e4m3x2_to_bf16x2(raw.z), e4m3x2_to_bf16x2(raw.z >> 16), e4m3x2_to_bf16x2(raw.w),
                  e4m3x2_to_bf16x2(raw.w >> 16));
}

// kF8: at most 128 registers a thread, so that two 8-warp CTAs fit a multiprocessor as with bf16
// K/V (the widening took the kernel to 143 registers, one CTA a multiprocessor).
template <int kWarps, bool kF8>
__global__ void __launch_bounds__(kWarps * 32, kF8 ? 2 : 1)
    attention_mma_kernel(const KernelArgs a) {
  await_inputs();
  constexpr int kBM = 16 * kWarps, kThreads = kWarps * 32;
  // Each thread copies whole 16-byte chunks: 8 to a bf16 row, 4 to an e4m3 one.
  constexpr int kCopyChunks = kF8 ? kF8Chunks : kChunks;
  constexpr int kRowsPerPass = kThreads / kCopyChunks;
  constexpr int kLoadRows = kBN / kRowsPerPass;  // K/V rows each thread copies per tile
  extern __shared__ __align__(128) unsigned char smem[];
  const uint32_t s_q = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  const uint32_t s_k = s_q + kBM * kD * 2;
  const uint32_t s_v = s_k + 2 * kBN * kD * 2;
  const uint32_t s_raw = s_v + 2 * kBN * kD * 2;  // kF8: [stage][K, V][kBN][kD] e4m3 bytes
  constexpr uint32_t kTileBytes = kBN * kD * 2;
  constexpr uint32_t kRawTileBytes = kBN * kD;

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int q0 = blockIdx.x * kBM, h = blockIdx.y;
  const int64_t kbeg = int64_t(blockIdx.z) * a.keys_per_split;
  const int64_t kend = min(a.nk, kbeg + a.keys_per_split);
  const int ntiles = static_cast<int>((kend - kbeg + kBN - 1) / kBN);
  constexpr int kEltBytes = kF8 ? 1 : 2;
  const int64_t row_stride = int64_t(a.heads) * kD * kEltBytes;  // bytes between tokens
  const int64_t head_off = int64_t(h) * kD * kEltBytes;
  // e4m3: S = scale_k * (q . K8) and O = scale_v * (P . V8), the scales of this head.
  const float score_log2 = kF8 ? a.scale_log2 * a.kv_scales[h] : a.scale_log2;
  const float out_scale = kF8 ? a.kv_scales[a.heads + h] : 1.f;

  // Q tile.
  const char* qbase = static_cast<const char*>(a.q);
  for (int c = tid; c < kBM * kChunks; c += kThreads) {
    const int r = c / kChunks, ch = c % kChunks;
    const bool ok = q0 + r < a.nq;
    const char* src = ok ? qbase + (int64_t(q0 + r) * a.heads + h) * kD * 2 + ch * 16 : qbase;
    cp_async16(s_q + swz(r, ch), src, ok);
  }

  // Each thread copies chunk `my_chunk` of rows my_row + i * kRowsPerPass of every K/V tile and
  // follows those rows through the segment list with a cursor that only moves forward.
  const int my_chunk = tid % kCopyChunks, my_row = tid / kCopyChunks;
  int cursor[kLoadRows];
#pragma unroll
  for (int i = 0; i < kLoadRows; ++i)
    cursor[i] = find_segment(a.seg, min(kbeg + my_row + i * kRowsPerPass, a.nk - 1));

  auto load_tile = [&](int t, int stage) {
    const int64_t tile0 = kbeg + int64_t(t) * kBN;
#pragma unroll
    for (int i = 0; i < kLoadRows; ++i) {
      const int r = my_row + i * kRowsPerPass;
      const int64_t key = tile0 + r;
      const bool ok = key < kend;
      const char *ksrc = qbase, *vsrc = qbase;
      if (ok) {
        while (key >= a.seg.start[cursor[i] + 1]) ++cursor[i];
        const int64_t off = (key - a.seg.start[cursor[i]]) * row_stride + head_off + my_chunk * 16;
        ksrc = a.seg.k[cursor[i]] + off;
        vsrc = a.seg.v[cursor[i]] + off;
      }
      if constexpr (kF8) {
        const uint32_t o = stage * 2 * kRawTileBytes + r * kD + my_chunk * 16;
        cp_async16(s_raw + o, ksrc, ok);
        cp_async16(s_raw + kRawTileBytes + o, vsrc, ok);
      } else {
        const uint32_t o = stage * kTileBytes + swz(r, my_chunk);
        cp_async16(s_k + o, ksrc, ok);
        cp_async16(s_v + o, vsrc, ok);
      }
    }
  };
  // kF8: this thread's chunks of the raw stage, once landed, into the bf16 tiles of that stage
  // (raw chunk c holds dims 16c..16c+15: bf16 chunks 2c and 2c+1).
  auto widen_tile = [&](int stage) {
#pragma unroll
    for (int i = 0; i < kLoadRows; ++i) {
      const int r = my_row + i * kRowsPerPass;
      const uint32_t from = s_raw - s_q + stage * 2 * kRawTileBytes + r * kD + my_chunk * 16;
      const uint4 rk = *reinterpret_cast<const uint4*>(smem + from);
      const uint4 rv = *reinterpret_cast<const uint4*>(smem + from + kRawTileBytes);
      uint4 lo, hi;
      const uint32_t t0 = stage * kTileBytes + swz(r, 2 * my_chunk);
      const uint32_t t1 = stage * kTileBytes + swz(r, 2 * my_chunk + 1);
      widen_e4m3x16(rk, lo, hi);
      *reinterpret_cast<uint4*>(smem + (s_k - s_q) + t0) = lo;
      *reinterpret_cast<uint4*>(smem + (s_k - s_q) + t1) = hi;
      widen_e4m3x16(rv, lo, hi);
      *reinterpret_cast<uint4*>(smem + (s_v - s_q) + t0) = lo;
      *reinterpret_cast<uint4*>(smem + (s_v - s_q) + t1) = hi;
    }
  };

  load_tile(0, 0);
  cp_async_commit();

  uint32_t qf[4][4];  // A fragments of this warp's 16 query rows, 4 k-steps over head_dim
  float o[8][4];      // output accumulators: 8 column tiles of 8 dims
#pragma unroll
  for (int j = 0; j < 8; ++j) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.f;
  float m0 = -INFINITY, m1 = -INFINITY;  // running max (log2 units) of rows g and g+8
  float l0 = 0.f, l1 = 0.f;              // this thread's share of the running sums

  const int g = lane >> 2, tq = lane & 3;
  for (int t = 0; t < ntiles; ++t) {
    cp_async_wait_all();
    // Only this thread's own copies are known to have landed here: it widens just those. The
    // bf16 stage it writes was last read for tile t-2, before everyone passed the barrier of t-1.
    if constexpr (kF8) widen_tile(t & 1);
    __syncthreads();  // tile t landed for everyone, and everyone is done with tile t-1
    if (t == 0) {
#pragma unroll
      for (int kk = 0; kk < 4; ++kk) {
        const int mi = lane >> 3;
        const int r = warp * 16 + (lane & 7) + 8 * (mi & 1);
        ldmatrix_x4(s_q + swz(r, 2 * kk + (mi >> 1)), qf[kk][0], qf[kk][1], qf[kk][2], qf[kk][3]);
      }
    }
    if (t + 1 < ntiles) load_tile(t + 1, (t + 1) & 1);
    cp_async_commit();

    const uint32_t kt = s_k + (t & 1) * kTileBytes, vt = s_v + (t & 1) * kTileBytes;
    float s[8][4];
#pragma unroll
    for (int j = 0; j < 8; ++j) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.f;
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
#pragma unroll
      for (int np = 0; np < 4; ++np) {
        const int mi = lane >> 3;
        const int r = np * 16 + (lane & 7) + 8 * (mi >> 1);
        uint32_t b0, b1, b2, b3;
        ldmatrix_x4(kt + swz(r, 2 * kk + (mi & 1)), b0, b1, b2, b3);
        mma_bf16(s[2 * np], qf[kk], b0, b1);
        mma_bf16(s[2 * np + 1], qf[kk], b2, b3);
      }
    }

    // Online softmax in the log2 domain; columns past the range's end are masked.
    const int64_t tile0 = kbeg + int64_t(t) * kBN;
    const bool partial = tile0 + kBN > kend;
    float mx0 = -INFINITY, mx1 = -INFINITY;
#pragma unroll
    for (int j = 0; j < 8; ++j) {
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        float v = s[j][c] * score_log2;
        if (partial && tile0 + j * 8 + 2 * tq + (c & 1) >= kend) v = -INFINITY;
        s[j][c] = v;
      }
      mx0 = fmaxf(mx0, fmaxf(s[j][0], s[j][1]));
      mx1 = fmaxf(mx1, fmaxf(s[j][2], s[j][3]));
    }
#pragma unroll
    for (int off = 1; off < 4; off <<= 1) {
      mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, off));
      mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, off));
    }
    const float n0 = fmaxf(m0, mx0), n1 = fmaxf(m1, mx1);
    const float c0 = exp2f(m0 - n0), c1 = exp2f(m1 - n1);  // 0 on the first tile
    m0 = n0;
    m1 = n1;
    float sum0 = 0.f, sum1 = 0.f;
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      s[j][0] = exp2f(s[j][0] - n0);
      s[j][1] = exp2f(s[j][1] - n0);
      s[j][2] = exp2f(s[j][2] - n1);
      s[j][3] = exp2f(s[j][3] - n1);
      sum0 += s[j][0] + s[j][1];
      sum1 += s[j][2] + s[j][3];
    }
    l0 = l0 * c0 + sum0;
    l1 = l1 * c1 + sum1;
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      o[j][0] *= c0;
      o[j][1] *= c0;
      o[j][2] *= c1;
      o[j][3] *= c1;
    }

    // O += P . V: the score accumulators of two adjacent 8-key tiles are exactly the A fragment
    // of one 16-key step, so P never leaves registers.
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
      uint32_t pa[4];
      pa[0] = pack_bf16(s[2 * kk][0], s[2 * kk][1]);
      pa[1] = pack_bf16(s[2 * kk][2], s[2 * kk][3]);
      pa[2] = pack_bf16(s[2 * kk + 1][0], s[2 * kk + 1][1]);
      pa[3] = pack_bf16(s[2 * kk + 1][2], s[2 * kk + 1][3]);
#pragma unroll
      for (int dp = 0; dp < 4; ++dp) {
        const int mi = lane >> 3;
        const int r = kk * 16 + (lane & 7) + 8 * (mi & 1);
        uint32_t b0, b1, b2, b3;
        ldmatrix_x4_trans(vt + swz(r, 2 * dp + (mi >> 1)), b0, b1, b2, b3);
        mma_bf16(o[2 * dp], pa, b0, b1);
        mma_bf16(o[2 * dp + 1], pa, b2, b3);
      }
    }
  }
  cp_async_wait_all();

#pragma unroll
  for (int off = 1; off < 4; off <<= 1) {
    l0 += __shfl_xor_sync(0xffffffffu, l0, off);
    l1 += __shfl_xor_sync(0xffffffffu, l1, off);
  }
  const float inv0 = out_scale / l0, inv1 = out_scale / l1;
  const int r0 = q0 + warp * 16 + g, r1 = r0 + 8;
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    const int col = j * 8 + 2 * tq;
    if (r0 < a.nq) store_pair(a, r0, h, col, o[j][0] * inv0, o[j][1] * inv0);
    if (r1 < a.nq) store_pair(a, r1, h, col, o[j][2] * inv1, o[j][3] * inv1);
  }
  if (a.splits > 1 && tq == 0) {
    const int64_t base = int64_t(blockIdx.z) * a.nq;
    if (r0 < a.nq) a.part_lse[(base + r0) * a.heads + h] = m0 + __log2f(l0);
    if (r1 < a.nq) a.part_lse[(base + r1) * a.heads + h] = m1 + __log2f(l1);
  }
}

// ------------------------------------------------------------------------------------------------
// Generic kernel: one warp per query row, a tile of 32 keys per step (one key per lane for the
// scores, then every lane accumulates its share of the head dims over the 32 keys).

constexpr int kGenWarps = 4;
constexpr int kGenBN = 32;

// Copies a key tile's K and V rows into shared memory as floats, 16 bytes per load and several
// loads in flight per thread: the few-query calls (the camera head: one query per frame against
// every cached frame) are bound by this copy's latency, not by arithmetic.
template <class T>
__device__ __forceinline__ void load_tile16(const T* const* kp, const T* const* vp, float* sk,
                                            float* sv, int d, int ld, int tid) {
  constexpr int kPer = 16 / sizeof(T);  // elements per 16-byte chunk
  constexpr int kInFlight = 4;
  const int per_row = d / kPer, total = kGenBN * per_row;
  for (int base = tid; base < total; base += kGenWarps * 32 * kInFlight) {
    uint4 kc[kInFlight], vc[kInFlight];
#pragma unroll
    for (int u = 0; u < kInFlight; ++u) {
      const int e = base + u * kGenWarps * 32;
      const T* kr = e < total ? kp[e / per_row] : nullptr;
      kc[u] = vc[u] = make_uint4(0, 0, 0, 0);
      if (kr) {
        const int c = (e % per_row) * kPer;
        kc[u] = __ldg(reinterpret_cast<const uint4*>(kr + c));
        vc[u] = __ldg(reinterpret_cast<const uint4*>(vp[e / per_row] + c));
      }
    }
#pragma unroll
    for (int u = 0; u < kInFlight; ++u) {
      const int e = base + u * kGenWarps * 32;
      if (e >= total) break;
      const int r = e / per_row, c = (e % per_row) * kPer;
      const T* kt = reinterpret_cast<const T*>(&kc[u]);
      const T* vt = reinterpret_cast<const T*>(&vc[u]);
#pragma unroll
      for (int i = 0; i < kPer; ++i) {
        sk[r * ld + c + i] = to_f32(kt[i]);
        sv[r * ld + c + i] = to_f32(vt[i]);
      }
    }
  }
}

template <class T, int kPerLane>
__global__ void __launch_bounds__(kGenWarps * 32) attention_generic_kernel(const KernelArgs a) {
  await_inputs();
  extern __shared__ float gsm[];
  const int d = a.dim, ld = d + 1;  // +1: lanes read different rows, keep them on different banks
  float* sk = gsm;                  // [kGenBN][ld]
  float* sv = sk + kGenBN * ld;     // [kGenBN][ld]
  float* sq = sv + kGenBN * ld;     // [kGenWarps][d]
  const T** kp = reinterpret_cast<const T**>(sq + kGenWarps * d);
  const T** vp = kp + kGenBN;

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int row = blockIdx.x * kGenWarps + warp, h = blockIdx.y;
  const int64_t kbeg = int64_t(blockIdx.z) * a.keys_per_split;
  const int64_t kend = min(a.nk, kbeg + a.keys_per_split);
  const bool active = row < a.nq;

  const T* qrow = static_cast<const T*>(a.q) + (int64_t(active ? row : 0) * a.heads + h) * d;
  for (int e = lane; e < d; e += 32) sq[warp * d + e] = to_f32(qrow[e]);

  // Warp 0 owns the row pointers of the key tile: lane r follows key kbeg + r + 32 t.
  int cursor = 0;
  if (warp == 0) cursor = find_segment(a.seg, min(kbeg + lane, a.nk - 1));

  float acc[kPerLane];
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) acc[i] = 0.f;
  float m = -INFINITY, l = 0.f;

  for (int64_t tile0 = kbeg; tile0 < kend; tile0 += kGenBN) {
    __syncthreads();  // previous tile fully consumed
    if (warp == 0) {
      const int64_t key = tile0 + lane;
      const T *kr = nullptr, *vr = nullptr;
      if (key < kend) {
        while (key >= a.seg.start[cursor + 1]) ++cursor;
        const int64_t off = ((key - a.seg.start[cursor]) * a.heads + h) * d;
        kr = reinterpret_cast<const T*>(a.seg.k[cursor]) + off;
        vr = reinterpret_cast<const T*>(a.seg.v[cursor]) + off;
      }
      kp[lane] = kr;
      vp[lane] = vr;
    }
    __syncthreads();
    if (a.rows16) {
      load_tile16(kp, vp, sk, sv, d, ld, tid);
    } else {
      for (int e = tid; e < kGenBN * d; e += kGenWarps * 32) {
        const int r = e / d, c = e % d;
        const T* kr = kp[r];
        sk[r * ld + c] = kr ? to_f32(kr[c]) : 0.f;
        sv[r * ld + c] = kr ? to_f32(vp[r][c]) : 0.f;
      }
    }
    __syncthreads();
    if (!active) continue;

    float sc = 0.f;
    const float* qv = sq + warp * d;
    const float* kr = sk + lane * ld;
    for (int e = 0; e < d; ++e) sc += qv[e] * kr[e];
    sc = tile0 + lane < kend ? sc * a.scale_log2 : -INFINITY;
    const float mn = fmaxf(m, warp_max(sc));
    const float corr = exp2f(m - mn);
    const float p = exp2f(sc - mn);
    l = l * corr + warp_sum(p);
    m = mn;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) acc[i] *= corr;
    for (int j = 0; j < kGenBN; ++j) {
      const float pj = __shfl_sync(0xffffffffu, p, j);
      const float* vr = sv + j * ld;
#pragma unroll
      for (int i = 0; i < kPerLane; ++i) {
        const int e = lane + 32 * i;
        if (e < d) acc[i] += pj * vr[e];
      }
    }
  }
  if (!active) return;
  const float inv = 1.f / l;
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    const int e = lane + 32 * i;
    if (e >= d) continue;
    if (a.splits == 1) {
      store_elt(a.out, a.out_t, (int64_t(row) * a.heads + h) * d + e, acc[i] * inv);
    } else {
      a.part_o[((int64_t(blockIdx.z) * a.nq + row) * a.heads + h) * d + e] = acc[i] * inv;
    }
  }
  if (a.splits > 1 && lane == 0)
    a.part_lse[(int64_t(blockIdx.z) * a.nq + row) * a.heads + h] = m + __log2f(l);
}

// ------------------------------------------------------------------------------------------------
// Row kernel: a few queries (the camera head's one per frame) against many keys, head_dim 32 kV.
// Such calls read every cached row once and compute little, so the kernel is built to keep the
// memory system busy: a lane holds kV of a row's dims in registers, a warp loads U whole K and V
// rows at once (one coalesced access per row) and reduces their scores with shuffles; 8 warps per
// CTA each keep their own online softmax and are combined in shared memory at the end.

constexpr int kRowWarps = 8;
constexpr int kRowsMaxQueries = 8;  // more queries per call: the generic kernel reuses its tiles

template <int kV>
constexpr int row_keys_per_warp() {
  return kV >= 8 ? 4 : 8;  // registers for U K rows and U V rows of kV values each
}

template <class T, int kV>
__global__ void __launch_bounds__(kRowWarps * 32) attention_rows_kernel(const KernelArgs a) {
  await_inputs();
  constexpr int U = row_keys_per_warp<kV>();
  constexpr int kChunk = kRowWarps * U;  // keys per CTA step
  constexpr int D = 32 * kV;
  __shared__ const T* kp[kChunk];
  __shared__ const T* vp[kChunk];
  __shared__ float sm_m[kRowWarps], sm_l[kRowWarps];
  __shared__ float so[kRowWarps][D];

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int row = blockIdx.x, h = blockIdx.y;
  const int64_t kbeg = int64_t(blockIdx.z) * a.keys_per_split;
  const int64_t kend = min(a.nk, kbeg + a.keys_per_split);

  float q[kV];
  load_vec<kV>(static_cast<const T*>(a.q) + (int64_t(row) * a.heads + h) * D + lane * kV, q);
#pragma unroll
  for (int i = 0; i < kV; ++i) q[i] *= a.scale_log2;

  float acc[kV];
#pragma unroll
  for (int i = 0; i < kV; ++i) acc[i] = 0.f;
  float m = -INFINITY, l = 0.f;  // identical in every lane of a warp

  for (int64_t c0 = kbeg; c0 < kend; c0 += kChunk) {
    if (tid < kChunk) {
      const int64_t key = c0 + tid;
      const T *kr = nullptr, *vr = nullptr;
      if (key < kend) {
        const int sg = find_segment(a.seg, key);
        const int64_t off = ((key - a.seg.start[sg]) * a.heads + h) * D;
        kr = reinterpret_cast<const T*>(a.seg.k[sg]) + off;
        vr = reinterpret_cast<const T*>(a.seg.v[sg]) + off;
      }
      kp[tid] = kr;
      vp[tid] = vr;
    }
    __syncthreads();
    float kr[U][kV], vr[U][kV];
    bool valid[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const T* k = kp[warp * U + u];
      const T* v = vp[warp * U + u];
      valid[u] = k != nullptr;
      if (valid[u]) {
        load_vec<kV>(k + lane * kV, kr[u]);
        load_vec<kV>(v + lane * kV, vr[u]);
      } else {
#pragma unroll
        for (int i = 0; i < kV; ++i) kr[u][i] = vr[u][i] = 0.f;
      }
    }
    __syncthreads();  // the pointer table is rewritten by the next step
    float s[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      float t = 0.f;
#pragma unroll
      for (int i = 0; i < kV; ++i) t += q[i] * kr[u][i];
      s[u] = t;
    }
#pragma unroll
    for (int u = 0; u < U; ++u) s[u] = valid[u] ? warp_sum(s[u]) : -INFINITY;
    float mx = s[0];
#pragma unroll
    for (int u = 1; u < U; ++u) mx = fmaxf(mx, s[u]);
    const float mn = fmaxf(m, mx);
    const float base = mn == -INFINITY ? 0.f : mn;  // no key yet: every weight stays 0
    const float corr = exp2f(m - base);
    l *= corr;
#pragma unroll
    for (int i = 0; i < kV; ++i) acc[i] *= corr;
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const float p = exp2f(s[u] - base);
      l += p;
#pragma unroll
      for (int i = 0; i < kV; ++i) acc[i] += p * vr[u][i];
    }
    m = mn;
  }

  if (lane == 0) {
    sm_m[warp] = m;
    sm_l[warp] = l;
  }
#pragma unroll
  for (int i = 0; i < kV; ++i) so[warp][lane * kV + i] = acc[i];
  __syncthreads();
  float mall = -INFINITY;
#pragma unroll
  for (int w = 0; w < kRowWarps; ++w) mall = fmaxf(mall, sm_m[w]);
  float wt[kRowWarps], lall = 0.f;
#pragma unroll
  for (int w = 0; w < kRowWarps; ++w) {
    wt[w] = sm_m[w] == -INFINITY ? 0.f : exp2f(sm_m[w] - mall);  // a warp without keys adds 0
    lall += wt[w] * sm_l[w];
  }
  const float inv = 1.f / lall;
  for (int e = tid; e < D; e += kRowWarps * 32) {
    float o = 0.f;
#pragma unroll
    for (int w = 0; w < kRowWarps; ++w) o += wt[w] * so[w][e];
    if (a.splits == 1)
      store_elt(a.out, a.out_t, (int64_t(row) * a.heads + h) * D + e, o * inv);
    else
      a.part_o[((int64_t(blockIdx.z) * a.nq + row) * a.heads + h) * D + e] = o * inv;
  }
  if (a.splits > 1 && tid == 0)
    a.part_lse[(int64_t(blockIdx.z) * a.nq + row) * a.heads + h] = mall + __log2f(lall);
}

// ------------------------------------------------------------------------------------------------
// Merge of the per-split partial outputs: a thread per V values of one (query, head) row; the
// threads of a row each recompute the splits' weights from the log-sum-exps (L1 hits). One warp
// per row with 4-byte accesses took 7.6 us per call at 978 queries x 16 heads x 64, two splits,
// as much as half the attention it finished for the 978-key frame and DINO layers.
template <int V>
__global__ void merge_kernel(const KernelArgs a) {
  await_inputs();
  const int groups = a.dim / V;
  const int64_t items = int64_t(a.nq) * a.heads;
  const int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t >= items * groups) return;
  const int64_t item = t / groups;
  const int e0 = static_cast<int>(t % groups) * V;
  // Unrolled so that several splits' loads are in flight at once (the row kernel's calls have
  // few items and many splits); the sums still run in split order.
  float mx = -INFINITY;
#pragma unroll 4
  for (int s = 0; s < a.splits; ++s) mx = fmaxf(mx, a.part_lse[s * items + item]);
  float wsum = 0.f, acc[V] = {};
#pragma unroll 4
  for (int s = 0; s < a.splits; ++s) {
    const float w = exp2f(a.part_lse[s * items + item] - mx);
    wsum += w;
    const float* p = a.part_o + (s * items + item) * a.dim + e0;
    float v[V];
    if constexpr (V == 4)
      load_vec<4>(p, v);
    else
      v[0] = p[0];
#pragma unroll
    for (int i = 0; i < V; ++i) acc[i] += w * v[i];
  }
  const float inv = 1.f / wsum;
#pragma unroll
  for (int i = 0; i < V; ++i) store_elt(a.out, a.out_t, item * a.dim + e0 + i, acc[i] * inv);
}

template <class Kernel>
int resident_ctas(Context& ctx, Kernel kernel, int threads, size_t smem) {
  int per_sm = 0;
  LB_CUDA(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, smem));
  return std::max(1, per_sm) * ctx.prop.multiProcessorCount;
}

template <int kWarps, bool kF8>
void launch_mma(Context& ctx, KernelArgs& k, int forced_splits) {
  constexpr int kBM = 16 * kWarps;
  constexpr int kSmem = mma_smem_bytes<kWarps, kF8>();
  static bool configured = false;
  if (!configured) {
    LB_CUDA(cudaFuncSetAttribute(attention_mma_kernel<kWarps, kF8>,
                                 cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
    configured = true;
  }
  const int64_t qtiles = (k.nq + kBM - 1) / kBM;
  const int64_t tiles = (k.nk + kBN - 1) / kBN;
  const int slots = resident_ctas(ctx, attention_mma_kernel<kWarps, kF8>, kWarps * 32, kSmem);
  plan_splits(ctx, k, tiles, kBN,
              forced_splits > 0 ? forced_splits : choose_splits(qtiles * k.heads, slots, tiles, 4));
  const dim3 grid(static_cast<unsigned>(qtiles), static_cast<unsigned>(k.heads),
                  static_cast<unsigned>(k.splits));
  launch_kernel(attention_mma_kernel<kWarps, kF8>, grid, kWarps * 32, kSmem, ctx.stream, k);
}

template <class T, int kPerLane>
void launch_generic(Context& ctx, KernelArgs& k, int forced_splits) {
  const size_t smem =
      (2 * kGenBN * (k.dim + 1) + kGenWarps * k.dim) * sizeof(float) + 2 * kGenBN * sizeof(void*);
  if (smem > 48 * 1024) {  // head_dim above ~180 needs the opt-in shared-memory limit
    LB_CUDA(cudaFuncSetAttribute(attention_generic_kernel<T, kPerLane>,
                                 cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 static_cast<int>(smem)));
  }
  const int64_t qtiles = (k.nq + kGenWarps - 1) / kGenWarps;
  const int64_t tiles = (k.nk + kGenBN - 1) / kGenBN;
  const int slots = resident_ctas(ctx, attention_generic_kernel<T, kPerLane>, kGenWarps * 32, smem);
  // Down to one tile per split: with few queries (the camera head's one per frame) the heads
  // alone occupy a small fraction of the GPU, and each CTA's tiles run one after another.
  plan_splits(ctx, k, tiles, kGenBN,
              forced_splits > 0 ? forced_splits : choose_splits(qtiles * k.heads, slots, tiles, 1));
  const dim3 grid(static_cast<unsigned>(qtiles), static_cast<unsigned>(k.heads),
                  static_cast<unsigned>(k.splits));
  launch_kernel(attention_generic_kernel<T, kPerLane>, grid, kGenWarps * 32, smem, ctx.stream, k);
}

template <class T, int kV>
void launch_rows(Context& ctx, KernelArgs& k, int forced_splits) {
  constexpr int kChunk = kRowWarps * row_keys_per_warp<kV>();
  const int64_t base = int64_t(k.nq) * k.heads;
  const int64_t tiles = (k.nk + kChunk - 1) / kChunk;
  // About two CTAs per SM and at least two key steps per CTA: enough loads in flight to stream
  // the rows at full bandwidth, and few splits for the merge to combine.
  const int64_t want = (2 * int64_t(ctx.prop.multiProcessorCount) + base - 1) / base;
  const int64_t splits = std::max<int64_t>(
      1, std::min<int64_t>({want, (tiles + 1) / 2, scratch::kMaxAttentionSplits}));
  plan_splits(ctx, k, tiles, kChunk, forced_splits > 0 ? forced_splits : static_cast<int>(splits));
  const dim3 grid(static_cast<unsigned>(k.nq), static_cast<unsigned>(k.heads),
                  static_cast<unsigned>(k.splits));
  launch_kernel(attention_rows_kernel<T, kV>, grid, kRowWarps * 32, 0, ctx.stream, k);
}

bool aligned16(const void* p) {
  return (reinterpret_cast<uintptr_t>(p) & 15) == 0;
}

}  // namespace

void build_key_tables(const std::vector<const std::vector<KVSegment>*>& lists,
                      std::vector<char>& bytes, std::vector<KeyTable>& tables) {
  bytes.clear();
  tables.clear();
  for (const auto* list : lists) {
    KeyTable t;
    std::vector<int64_t> start;
    std::vector<const void*> kp, vp;
    t.scales = list->empty() ? nullptr : list->front().scales;
    for (const auto& s : *list) {
      if (s.tokens <= 0) continue;
      LINGBOT_CHECK(s.k && s.v, "attention: segment without K/V storage");
      start.push_back(t.keys);
      kp.push_back(s.k);
      vp.push_back(s.v);
      t.keys += s.tokens;
      t.aligned16 = t.aligned16 && aligned16(s.k) && aligned16(s.v);
    }
    start.push_back(t.keys);
    t.nseg = static_cast<int>(kp.size());
    // Every entry is 8 bytes, so each table stays 8-byte aligned within the buffer.
    const size_t at = bytes.size(), n = static_cast<size_t>(t.nseg);
    bytes.resize(at + (n + 1) * sizeof(int64_t) + 2 * n * sizeof(void*));
    std::memcpy(bytes.data() + at, start.data(), (n + 1) * sizeof(int64_t));
    std::memcpy(bytes.data() + at + (n + 1) * sizeof(int64_t), kp.data(), n * sizeof(void*));
    std::memcpy(bytes.data() + at + (n + 1) * sizeof(int64_t) + n * sizeof(void*), vp.data(),
                n * sizeof(void*));
    t.dev = reinterpret_cast<const char*>(at);
    tables.push_back(t);
  }
}

void attention(Context& ctx, const AttentionArgs& a) {
  LINGBOT_CHECK(a.dim > 0 && a.dim <= 256, "attention: head_dim must be in 1..256 on CUDA");
  LINGBOT_CHECK(a.heads > 0 && a.heads <= 65535, "attention: bad head count");
  if (a.nq <= 0) return;
  const KeyTable& t = *a.keys;
  LINGBOT_CHECK(t.keys > 0, "attention over an empty key set");
  const int n = t.nseg;
  const int64_t nk = t.keys;
  const char* dev = t.dev;
  bool all_aligned = aligned16(a.q);
  const bool kv_aligned = t.aligned16;

  KernelArgs k{};
  k.q = a.q;
  k.out = a.out;
  k.out_t = a.out_t;
  k.seg.start = reinterpret_cast<const int64_t*>(dev);
  k.seg.k = reinterpret_cast<const char* const*>(dev + (n + 1) * sizeof(int64_t));
  k.seg.v =
      reinterpret_cast<const char* const*>(dev + (n + 1) * sizeof(int64_t) + n * sizeof(void*));
  k.seg.nseg = n;
  k.nq = a.nq;
  k.heads = a.heads;
  k.dim = a.dim;
  k.nk = nk;
  k.scale_log2 = a.scale * kLog2e;
  k.rows16 = kv_aligned && (a.dim * (a.qkv_t == kF32 ? 4 : 2)) % 16 == 0;
  k.kv_scales = t.scales;

  // Kernel choice and tuning knobs for tests and benchmarks: LINGBOT_ATTN_IMPL=mma|wgmma forces
  // the tensor-core kernel (wgmma only where wgmma_supported; elsewhere it falls back to mma),
  // LINGBOT_ATTN_IMPL=generic the generic kernel where the row kernel would run,
  // LINGBOT_ATTN_SPLITS forces the split count (backend/switches.h). The mma kernel runs 8 warps
  // (128-query tiles): on H200 at 978 queries they ran 220 TFLOP/s against 181 for 4 warps (72k
  // keys), each K/V tile fetched from L2 serving twice the queries.
  // The wgmma kernel keeps the running maximum in raw score units, which needs scale > 0.
  const int forced_splits = switches().attn_splits;
  const std::string& impl = switches().attn_impl;
  all_aligned = all_aligned && kv_aligned;
  const bool tensor_cores = a.qkv_t == kBF16 && a.dim == kD && all_aligned;
  const bool wgmma = tensor_cores && impl != "mma" && a.scale > 0.f && wgmma_supported(ctx);
  const char* used = "generic";
  if (t.scales) {
    // e4m3 K/V: the Hopper kernel takes S on e4m3 operands; the mma.sync kernel (every other GPU,
    // the portable path, LINGBOT_ATTN_IMPL=mma) widens them to bf16 as it loads them.
    LINGBOT_CHECK(a.qkv_t == kBF16 && a.dim == kD && all_aligned,
                  "attention: an fp8 KV cache needs bf16 queries, head_dim 64 and 16-byte aligned "
                  "rows");
    if (wgmma) {
      launch_wgmma(ctx, k, forced_splits);
      used = "wgmma-fp8";
    } else {
      launch_mma<8, true>(ctx, k, forced_splits);
      used = "mma-fp8";
    }
  } else if (wgmma) {
    launch_wgmma(ctx, k, forced_splits);
    used = "wgmma";
  } else if (tensor_cores) {
    launch_mma<8, false>(ctx, k, forced_splits);
    used = "mma";
  } else if (impl != "generic" && a.nq <= kRowsMaxQueries && all_aligned &&
             (a.dim == 128 || a.dim == 256 || (a.qkv_t == kF32 && a.dim == 64))) {
    // Few queries, rows of at least 8 bytes a lane: the row kernel.
    auto rows = [&](auto tv) {
      using T = decltype(tv);
      if constexpr (sizeof(T) == 4) {  // bf16 rows of 64 would give a lane 4 bytes
        if (a.dim == 64) return launch_rows<T, 2>(ctx, k, forced_splits);
      }
      if (a.dim == 128)
        launch_rows<T, 4>(ctx, k, forced_splits);
      else
        launch_rows<T, 8>(ctx, k, forced_splits);
    };
    LINGBOT_CHECK(a.qkv_t == kF32 || a.qkv_t == kBF16, "attention: q/K/V must be F32 or BF16");
    if (a.qkv_t == kF32)
      rows(float{});
    else
      rows(__nv_bfloat16{});
    used = "rows";
  } else {
    auto generic = [&](auto tv) {
      using T = decltype(tv);
      if (a.dim <= 32)
        launch_generic<T, 1>(ctx, k, forced_splits);
      else if (a.dim <= 64)
        launch_generic<T, 2>(ctx, k, forced_splits);
      else if (a.dim <= 128)
        launch_generic<T, 4>(ctx, k, forced_splits);
      else
        launch_generic<T, 8>(ctx, k, forced_splits);
    };
    LINGBOT_CHECK(a.qkv_t == kF32 || a.qkv_t == kBF16, "attention: q/K/V must be F32 or BF16");
    if (a.qkv_t == kF32)
      generic(float{});
    else
      generic(__nv_bfloat16{});
  }
  if (verbose_level() >= 2) {
    std::fprintf(stderr,
                 "[lingbot cuda] attention nq=%d heads=%d dim=%d keys=%lld segments=%d %s "
                 "splits=%d\n",
                 a.nq, a.heads, a.dim, static_cast<long long>(nk), n, used, k.splits);
  }
  if (k.splits > 1) {
    const int64_t items = int64_t(a.nq) * a.heads;
    const bool vec = a.dim % 4 == 0;
    const int64_t threads = items * (vec ? a.dim / 4 : a.dim);
    const auto grid = static_cast<unsigned>((threads + 255) / 256);
    if (vec)
      launch_kernel(merge_kernel<4>, grid, 256, 0, ctx.stream, k);
    else
      launch_kernel(merge_kernel<1>, grid, 256, 0, ctx.stream, k);
  }
}

}  // namespace lingbot::cuda
