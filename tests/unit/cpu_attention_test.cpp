// CpuBackend::attention against a plain double-precision reference.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>
#include <random>
#include <vector>

#include "backend/cpu/attention.h"
#include "backend/ops.h"

namespace lingbot {
namespace {

// Random K/V split into segments of the given token counts, all [tokens, heads, head_dim] F32.
struct KV {
  std::vector<std::vector<float>> k, v;
  std::vector<KVSegment> segments;
};

KV make_kv(const std::vector<int32_t>& tokens, int64_t heads, int64_t dim, std::mt19937& rng,
           float spread) {
  std::normal_distribution<float> n(0.f, spread);
  KV kv;
  for (int32_t t : tokens) {
    kv.k.emplace_back(static_cast<size_t>(t * heads * dim));
    kv.v.emplace_back(static_cast<size_t>(t * heads * dim));
    for (float& x : kv.k.back()) x = n(rng);
    for (float& x : kv.v.back()) x = n(rng);
  }
  for (size_t i = 0; i < tokens.size(); ++i)
    kv.segments.push_back({kv.k[i].data(), kv.v[i].data(), tokens[i]});
  return kv;
}

// Float rounding allowed per unit of the error scale below.
constexpr double kEps = 1.0 / (1 << 24);

// out = softmax(q k^T * scale) v in double, plus per output element the error a float
// computation may make: sum_j p_j |v_j| (the size of the terms summed) times a relative error
// that grows with the scores' condition, scale * max_j sum_e |q_e k_je| (a score error of a few
// ulps of that magnitude shifts every p_j by as much, relatively).
void reference(const std::vector<float>& q, int64_t nq, int64_t heads, int64_t dim, const KV& kv,
               float scale, std::vector<double>& out, std::vector<double>& bound) {
  out.assign(q.size(), 0.0);
  bound.assign(q.size(), 0.0);
  std::vector<double> s;
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t i = 0; i < nq; ++i) {
      const float* qr = q.data() + (i * heads + h) * dim;
      s.clear();
      double cond = 0;
      for (const KVSegment& seg : kv.segments)
        for (int32_t t = 0; t < seg.tokens; ++t) {
          const float* kr = static_cast<const float*>(seg.k) + (t * heads + h) * dim;
          double dot = 0, abs = 0;
          for (int64_t e = 0; e < dim; ++e) {
            dot += static_cast<double>(qr[e]) * kr[e];
            abs += std::fabs(static_cast<double>(qr[e]) * kr[e]);
          }
          s.push_back(dot * scale);
          cond = std::max(cond, abs * scale);
        }
      const double rel = 16 * kEps + 4 * kEps * cond;
      const double mx = *std::max_element(s.begin(), s.end());
      double sum = 0;
      for (double& x : s) sum += (x = std::exp(x - mx));
      double* o = out.data() + (i * heads + h) * dim;
      double* b = bound.data() + (i * heads + h) * dim;
      size_t j = 0;
      for (const KVSegment& seg : kv.segments)
        for (int32_t t = 0; t < seg.tokens; ++t, ++j) {
          const float* vr = static_cast<const float*>(seg.v) + (t * heads + h) * dim;
          for (int64_t e = 0; e < dim; ++e) {
            o[e] += s[j] / sum * vr[e];
            b[e] += s[j] / sum * std::fabs(vr[e]) * rel;
          }
        }
    }
}

struct Case {
  int64_t nq, heads, dim;
  std::vector<int32_t> tokens;
  float spread = 1.f;   // of q and k: larger makes the softmax peakier
  bool rising = false;  // keys grow along the sequence, so the running max keeps rising
};

std::string describe(const Case& c) {
  int64_t nk = 0;
  for (int32_t t : c.tokens) nk += t;
  return std::to_string(c.nq) + " queries, " + std::to_string(nk) + " keys in " +
         std::to_string(c.tokens.size()) + " segments, " + std::to_string(c.heads) + " heads x " +
         std::to_string(c.dim) + (c.rising ? ", rising" : "") + ", spread " +
         std::to_string(c.spread);
}

// Runs one case through `run` (out poisoned with NaN first) and returns the worst error in units
// of the reference's error bound (so at most 1 passes).
template <class Run>
double worst_error(const Case& c, Run run) {
  std::mt19937 rng(static_cast<uint32_t>(c.nq * 131 + c.heads * 17 + c.dim + c.tokens.size()));
  KV kv = make_kv(c.tokens, c.heads, c.dim, rng, c.spread);
  if (c.rising) {
    int64_t nk = 0, j = 0;
    for (int32_t t : c.tokens) nk += t;
    for (size_t s = 0; s < c.tokens.size(); ++s)
      for (int32_t t = 0; t < c.tokens[s]; ++t, ++j)
        for (int64_t x = 0; x < c.heads * c.dim; ++x)
          kv.k[s][t * c.heads * c.dim + x] *= 1.f + 3.f * static_cast<float>(j) / nk;
  }
  std::vector<float> q(c.nq * c.heads * c.dim);
  std::normal_distribution<float> n(0.f, c.spread);
  for (float& x : q) x = n(rng);
  const float scale = 1.f / std::sqrt(static_cast<float>(c.dim));
  std::vector<double> want, bound;
  reference(q, c.nq, c.heads, c.dim, kv, scale, want, bound);
  std::vector<float> got(q.size(), std::numeric_limits<float>::quiet_NaN());
  run(q, kv, scale, got);
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double err = std::fabs(got[i] - want[i]) / (bound[i] + 1e-300);
    worst = std::max(worst, std::isfinite(got[i]) ? err : INFINITY);
  }
  return worst;
}

std::vector<Case> cases() {
  std::vector<Case> all;
  for (int64_t dim : {64, 32, 24, 20})
    for (int64_t heads : {1, 2, 16})
      for (int64_t nq : {1, 7, 17}) {
        all.push_back({nq, heads, dim, {1}});
        all.push_back({nq, heads, dim, {5, 0, 28}});
        all.push_back({nq, heads, dim, {131}, 3.f});
        all.push_back({nq, heads, dim, std::vector<int32_t>(300, 6)});
        all.push_back({nq, heads, dim, {33, 2, 1, 61}, 2.f, true});
      }
  // Few queries over many keys: key spans shared by the heads, split and merged.
  all.push_back({7, 2, 64, {20001}});
  all.push_back({17, 16, 24, std::vector<int32_t>(400, 6), 2.f});
  all.push_back({67, 2, 32, {3000}, 1.f, true});
  all.push_back({10, 2, 64, {1536, 1536, 1536, 96}, 1.f, true});
  all.push_back({1000, 2, 64, {131}});
  all.push_back({1000, 16, 64, {97}, 2.f});
  all.push_back({1000, 1, 32, {200, 800}, 1.f, true});
  return all;
}

// More threads than the machine may have, so that the key splits and their merge run too.
struct ThreadsAtLeast {
  explicit ThreadsAtLeast(int n) : saved(omp_get_max_threads()) {
    omp_set_num_threads(std::max(saved, n));
  }
  ~ThreadsAtLeast() { omp_set_num_threads(saved); }
  int saved;
};

void check_isa(cpu::AttentionIsa isa) {
  ThreadsAtLeast threads(4);
  double worst = 0;
  for (const Case& c : cases()) {
    const double err = worst_error(
        c, [&](const std::vector<float>& q, const KV& kv, float scale, std::vector<float>& out) {
          cpu::attention(q.data(), c.nq, c.heads, c.dim, kv.segments, scale, out.data(), isa);
        });
    EXPECT_LE(err, 1.0) << describe(c);
    worst = std::max(worst, err);
  }
  std::printf("[ attention ] worst error %.3f of the bound\n", worst);
}

TEST(CpuAttention, PortableKernelsMatchReference) {
  check_isa(cpu::AttentionIsa::Portable);
}

TEST(CpuAttention, Avx2KernelsMatchReference) {
  if (!cpu::attention_isa_available(cpu::AttentionIsa::Avx2))
    GTEST_SKIP() << "this processor has no AVX2+FMA";
  check_isa(cpu::AttentionIsa::Avx2);
}

TEST(CpuAttention, BackendMatchesReference) {
  auto be = make_cpu_backend();
  for (const Case& c : {Case{17, 2, 64, std::vector<int32_t>(300, 6)}, Case{1000, 16, 64, {300}},
                        Case{10, 2, 64, {1536, 1536, 96}, 1.f, true}}) {
    const double err = worst_error(
        c, [&](const std::vector<float>& q, const KV& kv, float scale, std::vector<float>& out) {
          Tensor qt = Tensor::zeros({c.nq, c.heads, c.dim}), ot = Tensor::zeros(qt.shape());
          std::copy(q.begin(), q.end(), qt.f32());
          std::fill_n(ot.f32(), ot.numel(), std::numeric_limits<float>::quiet_NaN());
          be->attention(qt, kv.segments, scale, ot);
          std::copy_n(ot.f32(), ot.numel(), out.data());
        });
    EXPECT_LE(err, 1.0) << describe(c);
  }
}

// A NaN in one key poisons its head's outputs (as the plain formula does), and only those.
TEST(CpuAttention, NanKeyPoisonsItsHead) {
  for (auto isa : {cpu::AttentionIsa::Portable, cpu::AttentionIsa::Auto}) {
    std::mt19937 rng(3);
    KV kv = make_kv({40, 300}, 2, 64, rng, 1.f);
    kv.k[1][(100 * 2 + 1) * 64 + 5] = std::numeric_limits<float>::quiet_NaN();  // head 1
    std::vector<float> q(5 * 2 * 64, 0.5f), out(q.size(), 0.f);
    cpu::attention(q.data(), 5, 2, 64, kv.segments, 0.125f, out.data(), isa);
    for (int64_t i = 0; i < 5; ++i)
      for (int64_t e = 0; e < 64; ++e) {
        EXPECT_TRUE(std::isfinite(out[(i * 2 + 0) * 64 + e]));
        EXPECT_TRUE(std::isnan(out[(i * 2 + 1) * 64 + e]));
      }
  }
}

// The vector exp2 against the library's, over the whole range the softmax feeds it.
TEST(CpuAttention, Exp2IsAccurate) {
  for (auto isa : {cpu::AttentionIsa::Portable, cpu::AttentionIsa::Auto}) {
    std::vector<float> x;
    for (int i = 0; i <= 2000000; ++i) x.push_back(-126.f * static_cast<float>(i) / 2000000.f);
    for (float v : {-1e-7f, -0.5f, -1.f, -1.5f, -125.99f, -126.f}) x.push_back(v);
    std::vector<float> y = x;
    cpu::exp2_nonpositive(y.data(), static_cast<int64_t>(y.size()), isa);
    double worst_ulp = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      const double want = std::exp2(static_cast<double>(x[i]));
      const double ulp = std::ldexp(1.0, std::ilogb(want) - 23);
      worst_ulp = std::max(worst_ulp, std::fabs(y[i] - want) / ulp);
    }
    EXPECT_LE(worst_ulp, 2.0);
    std::printf("[ exp2 ] worst error %.2f ulp\n", worst_ulp);
    std::vector<float> edge = {0.f, -127.f, -200.f, -std::numeric_limits<float>::infinity()};
    cpu::exp2_nonpositive(edge.data(), 4, isa);
    EXPECT_EQ(edge[0], 1.f);
    EXPECT_EQ(edge[1], 0.f);
    EXPECT_EQ(edge[2], 0.f);
    EXPECT_EQ(edge[3], 0.f);
  }
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Times one attention call shape (best of `reps`) and prints ms, the rate K/V are read at, and
// the arithmetic rate. Not part of the suite: run with --gtest_also_run_disabled_tests.
void bench(const char* what, int64_t nq, int64_t heads, int64_t dim,
           const std::vector<int32_t>& tokens, int reps) {
  std::mt19937 rng(1);
  KV kv = make_kv(tokens, heads, dim, rng, 1.f);
  int64_t nk = 0;
  for (int32_t t : tokens) nk += t;
  Tensor q = Tensor::zeros({nq, heads, dim}), out = Tensor::zeros({nq, heads, dim});
  std::normal_distribution<float> n(0.f, 1.f);
  for (int64_t i = 0; i < q.numel(); ++i) q.f32()[i] = n(rng);
  auto be = make_cpu_backend();
  const float scale = 1.f / std::sqrt(static_cast<float>(dim));
  be->attention(q, kv.segments, scale, out);  // warm up
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    be->attention(q, kv.segments, scale, out);
    best = std::min(best, seconds_since(t0));
  }
  const double kv_bytes = 2.0 * nk * heads * dim * sizeof(float);
  const double flops = 4.0 * nq * nk * heads * dim;
  std::printf(
      "[ bench ] %s: %lld queries x %lld keys x %lld heads x %lld dims: %.3f ms, "
      "K/V %.2f GB/s, %.1f GFLOP/s\n",
      what, static_cast<long long>(nq), static_cast<long long>(nk), static_cast<long long>(heads),
      static_cast<long long>(dim), best * 1e3, kv_bytes / best / 1e9, flops / best / 1e9);
  std::fflush(stdout);
}

TEST(CpuAttention, DISABLED_Benchmark) {
  // The soak's global attention at frame 10,000: 10 queries over 60,000 special keys held in
  // chunks of 6 x 256 rows.
  std::vector<int32_t> soak(60000 / 1536, 1536);
  soak.push_back(60000 % 1536);
  bench("soak-like", 10, 2, 64, soak, 10);
  // Within-frame attention of a larger input.
  bench("frame", 1000, 16, 64, {1000}, 5);
}

}  // namespace
}  // namespace lingbot
