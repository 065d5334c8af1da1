// Softmax attention on the CPU, tiled so that K and V are read once per block of queries.
//
// The shapes it serves range from ~1000 queries x ~1000 keys (attention within a frame) to ~10
// queries x tens of thousands of keys spread over many segments (global attention over the
// special-token stream of a long run). The second is bound by reading K/V, so nothing may cost
// more per key than the arithmetic of the few queries that use it.
//
// Work item: one head, a block of up to kMaxBlock queries, a range of keys. The item walks its
// keys in tiles of kTile rows (tiles run across segment boundaries) and keeps a running softmax
// per query ("online softmax"): for each tile
//   S = Q . K_tile^T        (Q pre-scaled by scale * log2(e), so the softmax can use exp2)
//   m' = max(m, rowmax S); O *= 2^(m - m'); l *= 2^(m - m')      (only when the max rises)
//   P = 2^(S - m'); l += rowsum P; O += P . V_tile
// and at the end out = O / l. Nothing grows with the number of keys. With few queries the keys
// are split as well (into spans the heads share in cache, and so that all threads have work),
// and the partial (m, l, O) of the splits are merged at the end.
#include "backend/cpu/attention.h"

#include <omp.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define LINGBOT_ATTN_X86 1
#endif

namespace lingbot::cpu {
namespace {

constexpr int kTile = 32;      // keys per tile; a multiple of 8 (the AVX2 kernels need 4 and 8)
constexpr int kMaxBlock = 48;  // queries per work item: their Q, O and scores stay in L1/L2
// Tiles are prepared this many ahead of the one computed, their rows prefetched into L2 (the
// hardware prefetcher alone leaves the few-query case waiting on memory; prefetching into L1 or
// further ahead measured slower).
constexpr int kAhead = 2;

// Key splits are made only down to this many keys each: merging costs a pass over O.
constexpr int64_t kMinSplitKeys = 512;
// With few queries, the keys are split into spans of this many, and all heads of a span are
// computed one after the other (on one thread, or side by side): a token's rows of all heads are
// adjacent, so a span is read from memory once for all heads and stays in L2 meanwhile. (One
// pass per head over all keys would fetch each line from memory once per head: the hardware
// prefetcher brings in the neighbouring heads' lines too.)
constexpr int64_t kSpanKeys = 1024;
// At most this many spans (longer ones beyond): each split keeps a partial O until the merge.
constexpr int64_t kMaxSpans = 64;
// Below this many multiply-adds the call runs on one thread: waking the team costs more.
constexpr int64_t kParallelWork = 1 << 15;
constexpr float kLog2e = 1.44269504088896341f;
constexpr float kInf = std::numeric_limits<float>::infinity();

// One tile: up to kTile keys of one head as pointers to their K and V rows (`dim` floats each).
// The K pointers are padded to a multiple of 4 with copies of the last row, so that the score
// kernels may always work on groups of 4 keys; only the first n columns are used.
struct Tile {
  const float* k[kTile];
  const float* v[kTile];
  int n = 0;
};

// The three steps of a tile, per instruction set. q, o: nq rows of dim floats; s: nq rows of
// kTile floats.
struct Kernels {
  // s[i][j] = q_i . k_j for j < n (and possibly up to n rounded up to 4).
  void (*scores)(const float* q, int nq, const Tile& t, int dim, float* s);
  // The online-softmax step over full rows of s (unused columns hold -inf): raises m, rescales
  // l and the rows of o, turns s into P = 2^(s - m) and adds its row sums to l.
  void (*softmax)(float* s, int nq, float* m, double* l, float* o, int dim);
  // o[i] += sum_j P[i][j] v_j for j < n.
  void (*accumulate)(const float* p, int nq, const Tile& t, int dim, float* o);
  void (*exp2)(float* x, int64_t n);
};

// The scalar part of the softmax step for one query: `mx` is the tile's row maximum. A NaN or
// +inf score makes the query's result NaN, as the straightforward formula would.
inline void raise_max(float mx, float& m, double& l, float* o, int dim) {
  if (!(mx < kInf)) {
    m = std::numeric_limits<float>::quiet_NaN();
    l = std::numeric_limits<double>::quiet_NaN();
    return;
  }
  if (!(mx > m)) return;  // also once m is NaN
  if (m > -kInf) {        // rescale what earlier tiles accumulated (nothing before the first)
    const float c = std::exp2(m - mx);
    l *= c;
    for (int e = 0; e < dim; ++e) o[e] *= c;
  }
  m = mx;
}

// ---- Portable kernels: plain loops the compiler vectorises for the build's baseline ISA. ----

void scores_portable(const float* q, int nq, const Tile& t, int dim, float* s) {
  for (int i = 0; i < nq; ++i) {
    const float* qr = q + i * dim;
    for (int j = 0; j < t.n; ++j) {
      const float* kr = t.k[j];
      float acc = 0.f;
#pragma omp simd reduction(+ : acc)
      for (int e = 0; e < dim; ++e) acc += qr[e] * kr[e];
      s[i * kTile + j] = acc;
    }
  }
}

void softmax_portable(float* s, int nq, float* m, double* l, float* o, int dim) {
  for (int i = 0; i < nq; ++i) {
    float* r = s + i * kTile;
    float mx = -kInf;
    bool nan = false;
    for (int j = 0; j < kTile; ++j) {
      mx = std::max(mx, r[j]);
      nan |= std::isnan(r[j]);
    }
    raise_max(nan ? std::numeric_limits<float>::quiet_NaN() : mx, m[i], l[i], o + i * dim, dim);
    float sum = 0.f;
    for (int j = 0; j < kTile; ++j) {
      r[j] = std::exp2(r[j] - m[i]);
      sum += r[j];
    }
    l[i] += sum;
  }
}

void accumulate_portable(const float* p, int nq, const Tile& t, int dim, float* o) {
  for (int i = 0; i < nq; ++i) {
    float* orow = o + i * dim;
    for (int j = 0; j < t.n; ++j) {
      const float w = p[i * kTile + j];
      const float* vr = t.v[j];
#pragma omp simd
      for (int e = 0; e < dim; ++e) orow[e] += w * vr[e];
    }
  }
}

void exp2_portable(float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] = x[i] < -126.f ? 0.f : std::exp2(x[i]);
}

constexpr Kernels kPortable{scores_portable, softmax_portable, accumulate_portable, exp2_portable};

// ---- AVX2 + FMA kernels, compiled for that ISA whatever the build's flags and chosen at run
// time. Register blocking: scores take 2 queries x 4 keys (8 accumulators of 8 partial sums,
// reduced together at the end instead of one horizontal sum per dot product); accumulate takes 2
// queries x 32 output dims (8 accumulators, V loaded once per key for both queries). ----
#ifdef LINGBOT_ATTN_X86
#define LINGBOT_AVX2 __attribute__((target("avx2,fma")))

// 2^x for x <= 0: x = n + f with n = round(x), f in [-0.5, 0.5]; 2^f from a degree-6
// polynomial (1 + f q(f), q interpolating (2^f - 1)/f at Chebyshev nodes: approximation error
// below 1e-8 relative, so the float evaluation decides the accuracy, ~1 ulp); 2^n is added
// into the exponent bits. Below -126 the result is 0 (true value < 1.2e-38).
LINGBOT_AVX2 inline __m256 exp2_avx2(__m256 x) {
  const __m256 lo = _mm256_set1_ps(-126.f);
  const __m256 underflow = _mm256_cmp_ps(x, lo, _CMP_LT_OQ);
  x = _mm256_max_ps(x, lo);
  const __m256 n = _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m256 f = _mm256_sub_ps(x, n);
  __m256 p = _mm256_set1_ps(1.545316336e-04f);
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.339086331e-03f));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(9.618083015e-03f));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(5.550356954e-02f));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(2.402265072e-01f));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(6.931471825e-01f));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.f));
  const __m256i shift = _mm256_slli_epi32(_mm256_cvtps_epi32(n), 23);
  const __m256 r = _mm256_castsi256_ps(_mm256_add_epi32(_mm256_castps_si256(p), shift));
  return _mm256_andnot_ps(underflow, r);
}

LINGBOT_AVX2 inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

LINGBOT_AVX2 inline float hmax(__m256 v) {
  __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_max_ps(s, _mm_movehl_ps(s, s));
  s = _mm_max_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// Scores of NQ (1 or 2) queries against 4 keys. Each accumulator holds 8 partial sums of one
// dot product; hadd trees then fold all of them at once: 9 shuffles/adds for 8 dot products.
template <int NQ>
LINGBOT_AVX2 inline void score_block(const float* q, const float* const* k, int dim, float* s) {
  __m256 a[NQ][4];
  for (int i = 0; i < NQ; ++i)
    for (int j = 0; j < 4; ++j) a[i][j] = _mm256_setzero_ps();
  for (int e = 0; e < dim; e += 8) {
    const __m256 k0 = _mm256_loadu_ps(k[0] + e), k1 = _mm256_loadu_ps(k[1] + e);
    const __m256 k2 = _mm256_loadu_ps(k[2] + e), k3 = _mm256_loadu_ps(k[3] + e);
    for (int i = 0; i < NQ; ++i) {
      const __m256 qv = _mm256_loadu_ps(q + i * dim + e);
      a[i][0] = _mm256_fmadd_ps(qv, k0, a[i][0]);
      a[i][1] = _mm256_fmadd_ps(qv, k1, a[i][1]);
      a[i][2] = _mm256_fmadd_ps(qv, k2, a[i][2]);
      a[i][3] = _mm256_fmadd_ps(qv, k3, a[i][3]);
    }
  }
  // hadd(hadd(a0, a1), hadd(a2, a3)) = [a0, a1, a2, a3 summed over lanes 0-3 | over lanes 4-7].
  __m256 u[NQ];
  for (int i = 0; i < NQ; ++i)
    u[i] = _mm256_hadd_ps(_mm256_hadd_ps(a[i][0], a[i][1]), _mm256_hadd_ps(a[i][2], a[i][3]));
  if constexpr (NQ == 2) {
    const __m256 lo = _mm256_permute2f128_ps(u[0], u[1], 0x20);  // [u0 low | u1 low]
    const __m256 hi = _mm256_permute2f128_ps(u[0], u[1], 0x31);  // [u0 high | u1 high]
    const __m256 r = _mm256_add_ps(lo, hi);
    _mm_storeu_ps(s, _mm256_castps256_ps128(r));
    _mm_storeu_ps(s + kTile, _mm256_extractf128_ps(r, 1));
  } else {
    _mm_storeu_ps(s, _mm_add_ps(_mm256_castps256_ps128(u[0]), _mm256_extractf128_ps(u[0], 1)));
  }
}

LINGBOT_AVX2 void scores_avx2(const float* q, int nq, const Tile& t, int dim, float* s) {
  const int n4 = (t.n + 3) & ~3;
  int i = 0;
  for (; i + 1 < nq; i += 2)
    for (int j = 0; j < n4; j += 4) score_block<2>(q + i * dim, t.k + j, dim, s + i * kTile + j);
  if (i < nq)
    for (int j = 0; j < n4; j += 4) score_block<1>(q + i * dim, t.k + j, dim, s + i * kTile + j);
}

LINGBOT_AVX2 void softmax_avx2(float* s, int nq, float* m, double* l, float* o, int dim) {
  constexpr int kVecs = kTile / 8;
  for (int i = 0; i < nq; ++i) {
    float* r = s + i * kTile;
    __m256 x[kVecs];
    for (int c = 0; c < kVecs; ++c) x[c] = _mm256_loadu_ps(r + 8 * c);
    // max_ps drops NaNs, so they are looked for separately.
    __m256 mx = x[0], nan = _mm256_cmp_ps(x[0], x[0], _CMP_UNORD_Q);
    for (int c = 1; c < kVecs; ++c) {
      mx = _mm256_max_ps(mx, x[c]);
      nan = _mm256_or_ps(nan, _mm256_cmp_ps(x[c], x[c], _CMP_UNORD_Q));
    }
    raise_max(_mm256_movemask_ps(nan) ? std::numeric_limits<float>::quiet_NaN() : hmax(mx), m[i],
              l[i], o + i * dim, dim);
    const __m256 mv = _mm256_set1_ps(m[i]);
    __m256 sum = _mm256_setzero_ps();
    for (int c = 0; c < kVecs; ++c) {
      const __m256 p = exp2_avx2(_mm256_sub_ps(x[c], mv));
      _mm256_storeu_ps(r + 8 * c, p);
      sum = _mm256_add_ps(sum, p);
    }
    l[i] += hsum(sum);
  }
}

// o[MR rows][NV vectors from `col`] += P[MR rows] . V over the tile's keys.
template <int MR, int NV>
LINGBOT_AVX2 inline void accumulate_block(const float* p, const Tile& t, int dim, int col,
                                          float* o) {
  // The small loops are unrolled explicitly: otherwise GCC keeps acc in memory and stores it
  // back on every key.
  __m256 acc[MR][NV];
#pragma GCC unroll 4
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 4
    for (int c = 0; c < NV; ++c) acc[i][c] = _mm256_loadu_ps(o + i * dim + col + 8 * c);
  for (int j = 0; j < t.n; ++j) {
    __m256 vj[NV];
#pragma GCC unroll 4
    for (int c = 0; c < NV; ++c) vj[c] = _mm256_loadu_ps(t.v[j] + col + 8 * c);
#pragma GCC unroll 4
    for (int i = 0; i < MR; ++i) {
      const __m256 w = _mm256_broadcast_ss(p + i * kTile + j);
#pragma GCC unroll 4
      for (int c = 0; c < NV; ++c) acc[i][c] = _mm256_fmadd_ps(w, vj[c], acc[i][c]);
    }
  }
#pragma GCC unroll 4
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 4
    for (int c = 0; c < NV; ++c) _mm256_storeu_ps(o + i * dim + col + 8 * c, acc[i][c]);
}

template <int MR>
LINGBOT_AVX2 inline void accumulate_rows(const float* p, const Tile& t, int dim, float* o) {
  int col = 0;
  for (; col + 32 <= dim; col += 32) accumulate_block<MR, 4>(p, t, dim, col, o);
  switch ((dim - col) / 8) {
    case 3:
      accumulate_block<MR, 3>(p, t, dim, col, o);
      break;
    case 2:
      accumulate_block<MR, 2>(p, t, dim, col, o);
      break;
    case 1:
      accumulate_block<MR, 1>(p, t, dim, col, o);
      break;
  }
}

LINGBOT_AVX2 void accumulate_avx2(const float* p, int nq, const Tile& t, int dim, float* o) {
  int i = 0;
  for (; i + 1 < nq; i += 2) accumulate_rows<2>(p + i * kTile, t, dim, o + i * dim);
  if (i < nq) accumulate_rows<1>(p + i * kTile, t, dim, o + i * dim);
}

LINGBOT_AVX2 void exp2_avx2_n(float* x, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(x + i, exp2_avx2(_mm256_loadu_ps(x + i)));
  if (i < n) {
    float tail[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    std::copy(x + i, x + n, tail);
    _mm256_storeu_ps(tail, exp2_avx2(_mm256_loadu_ps(tail)));
    std::copy(tail, tail + (n - i), x + i);
  }
}

constexpr Kernels kAvx2{scores_avx2, softmax_avx2, accumulate_avx2, exp2_avx2_n};

bool have_avx2() {
  static const bool yes = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return yes;
}
#else
bool have_avx2() {
  return false;
}
#endif

const Kernels& pick(AttentionIsa isa, int64_t dim) {
#ifdef LINGBOT_ATTN_X86
  if (isa != AttentionIsa::Portable && dim % 8 == 0 && have_avx2()) return kAvx2;
#endif
  return kPortable;
}

// One work item's running state, per thread and reused across calls (no allocation per call
// once the buffers have grown).
struct Scratch {
  std::vector<float> q, s, o, m, kp, vp;
  std::vector<double> l;
  void reserve(int64_t dim) {
    q.resize(kMaxBlock * dim);
    o.resize(kMaxBlock * dim);
    s.resize(kMaxBlock * kTile);
    m.resize(kMaxBlock);
    kp.resize(kTile * dim);
    vp.resize(kTile * dim);
    l.resize(kMaxBlock);
  }
};

struct Problem {
  const float* q;
  int64_t nq, heads, dim;
  const std::vector<KVSegment>* kv;
  const int64_t* start;  // start[i]: global index of segment i's first key; start[size] = nk
  float scale;
  const float* f8_scales;  // e4m3 rows: [2, heads] K then V scales; null: F32 rows
};

// Walks the keys [k0, k1) of head `hh` across the segments, a tile at a time.
class TileWalker {
 public:
  TileWalker(const Problem& pb, int64_t hh, int64_t k0, int64_t k1)
      : kv_(*pb.kv),
        esize_(pb.f8_scales ? 1 : 4),
        dim_(pb.dim),
        row_(pb.heads * pb.dim),
        head_(hh * pb.dim),
        pos_(k0),
        end_(k1) {
    // The segment holding key k0: the last one starting at or before it (never an empty one).
    const int64_t nseg = static_cast<int64_t>(kv_.size());
    seg_ = std::upper_bound(pb.start, pb.start + nseg + 1, k0) - pb.start - 1;
    tok_ = k0 - pb.start[seg_];
  }

  // Fills `t` with the next keys and prefetches their rows; t.n = 0 at the end.
  void fill(Tile& t) {
    t.n = 0;
    while (t.n < kTile && pos_ < end_) {
      if (tok_ == kv_[seg_].tokens) {
        ++seg_;
        tok_ = 0;
        continue;
      }
      // e4m3 rows are bytes behind a float pointer until run_item converts them.
      const int64_t off = (tok_ * row_ + head_) * esize_;
      t.k[t.n] = reinterpret_cast<const float*>(static_cast<const char*>(kv_[seg_].k) + off);
      t.v[t.n] = reinterpret_cast<const float*>(static_cast<const char*>(kv_[seg_].v) + off);
      prefetch_row(t.k[t.n]);
      prefetch_row(t.v[t.n]);
      ++t.n;
      ++tok_;
      ++pos_;
    }
  }

 private:
  void prefetch_row(const float* r) const {
    // Locality 1: into L2 only. 16 floats are a cache line; rows need not start on one.
    for (int64_t e = 0; e < dim_; e += 16) __builtin_prefetch(r + e, 0, 1);
    __builtin_prefetch(r + dim_ - 1, 0, 1);
  }

  const std::vector<KVSegment>& kv_;
  const int64_t esize_, dim_, row_, head_;
  int64_t pos_, end_, seg_, tok_;
};

// Every e4m3 code's value.
const std::array<float, 256> kF8Values = [] {
  std::array<float, 256> t{};
  for (int i = 0; i < 256; ++i) t[i] = f8e4m3_to_f32(static_cast<uint8_t>(i));
  return t;
}();

// Runs heads `hh`, queries [q0, q0 + nqb), keys [k0, k1); leaves the unnormalised (m, l, O) in
// `sc`.
void run_item(const Kernels& kern, const Problem& pb, int64_t hh, int64_t q0, int nqb, int64_t k0,
              int64_t k1, Scratch& sc) {
  const int dim = static_cast<int>(pb.dim);
  const int64_t row = pb.heads * pb.dim;  // distance between a token's rows
  // Pre-scaling q by scale * log2(e) puts the scores in base 2: the softmax then needs exp2.
  const float qscale = pb.scale * kLog2e;
  for (int i = 0; i < nqb; ++i) {
    const float* src = pb.q + (q0 + i) * row + hh * dim;
    for (int e = 0; e < dim; ++e) sc.q[i * dim + e] = src[e] * qscale;
  }
  std::fill_n(sc.o.data(), nqb * dim, 0.f);
  std::fill_n(sc.m.data(), nqb, -kInf);
  std::fill_n(sc.l.data(), nqb, 0.0);

  // Rows of one head lie heads * dim floats apart. From 1 KiB on, a tile's rows fall into few L1
  // sets and evict each other while the query pairs pass over them (at 16 heads x 64 dims all
  // into the same sets); then each tile is first copied into one contiguous block. Closer rows
  // are used where they are: the copy would cost more than it saves.
  // e4m3 rows are always converted into the block (value = stored value * the head's scale).
  const bool f8 = pb.f8_scales != nullptr;
  const bool pack = f8 || (row * sizeof(float) >= 1024 && nqb > 2);
  const float ks = f8 ? pb.f8_scales[hh] : 1.f, vs = f8 ? pb.f8_scales[pb.heads + hh] : 1.f;
  TileWalker walk(pb, hh, k0, k1);
  Tile ring[kAhead + 1];
  for (int i = 0; i < kAhead; ++i) walk.fill(ring[i]);
  for (int64_t it = 0;; ++it) {
    walk.fill(ring[(it + kAhead) % (kAhead + 1)]);
    Tile* tile = &ring[it % (kAhead + 1)];
    const int n = tile->n;
    if (n == 0) break;
    Tile packed;
    if (pack) {
      packed.n = n;
      for (int j = 0; j < n; ++j) {
        if (f8) {
          const auto* k8 = reinterpret_cast<const uint8_t*>(tile->k[j]);
          const auto* v8 = reinterpret_cast<const uint8_t*>(tile->v[j]);
          for (int e = 0; e < dim; ++e) {
            sc.kp[j * dim + e] = kF8Values[k8[e]] * ks;
            sc.vp[j * dim + e] = kF8Values[v8[e]] * vs;
          }
          packed.k[j] = &sc.kp[j * dim];
          packed.v[j] = &sc.vp[j * dim];
          continue;
        }
        packed.k[j] = std::copy_n(tile->k[j], dim, &sc.kp[j * dim]) - dim;
        packed.v[j] = std::copy_n(tile->v[j], dim, &sc.vp[j * dim]) - dim;
      }
      tile = &packed;
    }
    for (int j = n; j < ((n + 3) & ~3); ++j) tile->k[j] = tile->k[n - 1];
    kern.scores(sc.q.data(), nqb, *tile, dim, sc.s.data());
    if (n < kTile)
      for (int i = 0; i < nqb; ++i) std::fill(&sc.s[i * kTile + n], &sc.s[(i + 1) * kTile], -kInf);
    kern.softmax(sc.s.data(), nqb, sc.m.data(), sc.l.data(), sc.o.data(), dim);
    kern.accumulate(sc.s.data(), nqb, *tile, dim, sc.o.data());
  }
}

}  // namespace

bool attention_isa_available(AttentionIsa isa) {
  return isa != AttentionIsa::Avx2 || have_avx2();
}

void exp2_nonpositive(float* x, int64_t n, AttentionIsa isa) {
  pick(isa, 8).exp2(x, n);
}

void attention(const float* q, int64_t nq, int64_t heads, int64_t dim,
               const std::vector<KVSegment>& kv, float scale, float* out, AttentionIsa isa) {
  const Kernels& kern = pick(isa, dim);
  // Per-call bookkeeping lives in buffers of the calling thread, reused from call to call.
  thread_local std::vector<int64_t> start;
  thread_local std::vector<float> part_o, part_m;
  thread_local std::vector<double> part_l;
  start.assign(kv.size() + 1, 0);
  for (size_t i = 0; i < kv.size(); ++i) start[i + 1] = start[i] + kv[i].tokens;
  const int64_t nk = start.back();
  if (nq == 0) return;
  if (nk == 0) {  // softmax over nothing: define the result as zeros
    std::fill_n(out, nq * heads * dim, 0.f);
    return;
  }
  const Problem pb{q,   nq,           heads, dim,
                   &kv, start.data(), scale, kv.empty() ? nullptr : kv.front().scales};

  // Query blocks of equal size (at most kMaxBlock).
  const int64_t nblocks = (nq + kMaxBlock - 1) / kMaxBlock;
  const int64_t bq = (nq + nblocks - 1) / nblocks;
  const int threads = omp_in_parallel() ? 1 : omp_get_max_threads();
  const bool parallel = threads > 1 && nq * nk * heads * dim > kParallelWork;
  // With few (head, block) items, split the keys too: ~4 items per thread balance well. With
  // one or two query blocks, split them into spans the heads share in cache (see kSpanKeys).
  const int64_t base = heads * nblocks;
  int64_t splits = 1;
  if (parallel && base < 4 * threads)
    splits = std::clamp<int64_t>((4 * threads + base - 1) / base, 1,
                                 std::max<int64_t>(1, nk / kMinSplitKeys));
  if (nblocks <= 2 && heads > 1 && nk >= 2 * kSpanKeys)
    splits = std::max(splits, std::min(nk / kSpanKeys, kMaxSpans));
  const int64_t span = (nk + splits - 1) / splits;
  splits = (nk + span - 1) / span;
  const int64_t items = base * splits;
  if (splits > 1) {
    part_o.resize(items * bq * dim);
    part_m.resize(items * bq);
    part_l.resize(items * bq);
  }
  // The threads reach these through pointers: by name they would see their own (empty) copies.
  float* const po = part_o.data();
  float* const pm = part_m.data();
  double* const pl = part_l.data();

  // Items run heads first: (block, span, head), so the heads of a span run together.
#pragma omp parallel for schedule(dynamic, 1) if (parallel)
  for (int64_t it = 0; it < items; ++it) {
    thread_local Scratch sc;
    sc.reserve(dim);
    const int64_t hh = it % heads, sp = (it / heads) % splits, blk = it / (heads * splits);
    const int64_t q0 = blk * bq;
    const int nqb = static_cast<int>(std::min(bq, nq - q0));
    run_item(kern, pb, hh, q0, nqb, sp * span, std::min(nk, (sp + 1) * span), sc);
    if (splits == 1) {
      for (int i = 0; i < nqb; ++i) {
        const float inv = static_cast<float>(1.0 / sc.l[i]);
        float* dst = out + ((q0 + i) * heads + hh) * dim;
        for (int64_t e = 0; e < dim; ++e) dst[e] = sc.o[i * dim + e] * inv;
      }
    } else {
      std::copy_n(sc.o.data(), nqb * dim, po + it * bq * dim);
      std::copy_n(sc.m.data(), nqb, pm + it * bq);
      std::copy_n(sc.l.data(), nqb, pl + it * bq);
    }
  }
  if (splits == 1) return;

  // Merge the splits of each (head, block): rescale each to the common maximum and add. There
  // are splits only with few query blocks, at least kMinSplitKeys keys each: a pass over O per
  // split is little next to the attention itself, so one thread does it.
  for (int64_t hb = 0; hb < base; ++hb) {
    const int64_t hh = hb % heads, blk = hb / heads, q0 = blk * bq;
    const int nqb = static_cast<int>(std::min(bq, nq - q0));
    for (int i = 0; i < nqb; ++i) {
      float mx = -kInf;
      bool nan = false;
      for (int64_t sp = 0; sp < splits; ++sp) {
        const float m = pm[((blk * splits + sp) * heads + hh) * bq + i];
        mx = std::max(mx, m);
        nan |= std::isnan(m);
      }
      float* dst = out + ((q0 + i) * heads + hh) * dim;
      std::fill_n(dst, dim, 0.f);
      double l = nan ? std::numeric_limits<double>::quiet_NaN() : 0.0;
      for (int64_t sp = 0; sp < splits; ++sp) {
        const int64_t slot = ((blk * splits + sp) * heads + hh) * bq + i;
        const float c = std::exp2(pm[slot] - mx);
        l += pl[slot] * c;
        const float* o = po + slot * dim;
        for (int64_t e = 0; e < dim; ++e) dst[e] += o[e] * c;
      }
      const float inv = static_cast<float>(1.0 / l);
      for (int64_t e = 0; e < dim; ++e) dst[e] *= inv;
    }
  }
}

}  // namespace lingbot::cpu
