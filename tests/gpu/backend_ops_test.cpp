// Every CUDA op against the CPU reference on fresh random inputs. GPU outputs are poisoned with
// NaN before each call, so an element the kernel fails to write shows up as an infinite error.
// Skips when make_cuda_backend returns null (CPU-only builds, machines without a GPU).
//
// Tolerances (largest absolute error over largest absolute reference value, tests/test_util.h):
//  * F32 ops: 1e-5. Same math as the CPU in fp32 (no TF32), only summation order differs.
//  * BF16 outputs: each value is rounded once to bf16 (relative error 2^-9); where the GPU
//    rounds an intermediate the reference keeps in fp32 (GEMM output before GELU, the bias in a
//    non-fused epilogue) there are two roundings, so 8e-3 (2^-7) covers both with margin.
//  * BF16 attention: the reference runs on the same bf16-rounded q/K/V in fp32; the kernel also
//    rounds the softmax probabilities to bf16 before the P.V product (as FlashAttention does),
//    adding ~2^-9 relative noise per term, plus the output rounding: 1.5e-2.
// BF16 references are computed on inputs already rounded to bf16, so the tolerances measure
// only the kernels' own rounding.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "backend/ops.h"
#include "backend/switches.h"
#include "backend_bad_calls.h"
#include "cache/kv_stream.h"
#include "lingbot/error.h"
#include "test_util.h"

namespace lingbot {
namespace {

constexpr double kTolF32 = 1e-5;
constexpr double kTolBF16 = 8e-3;
constexpr double kTolAttnBF16 = 1.5e-2;

struct Backends {
  std::unique_ptr<Backend> cpu, gpu;
  std::string why;
  bool tried = false;
};
Backends& backends() {
  static Backends b;
  if (!b.tried) {
    b.tried = true;
    // LINGBOT_TEST_GPU_PATH=portable runs every test on the portable path (on an H100: what an
    // sm_80/86/89 GPU runs).
    const char* path = std::getenv("LINGBOT_TEST_GPU_PATH");
    b.gpu = make_cuda_backend(0, &b.why, parse_gpu_path(path && *path ? path : "auto"));
    if (b.gpu) b.cpu = make_cpu_backend();
  }
  return b;
}

// Releases the device before static destruction, while the CUDA runtime is still up.
class ReleaseGpu : public ::testing::Environment {
 public:
  void TearDown() override {
    backends().gpu.reset();
    backends().cpu.reset();
  }
};
[[maybe_unused]] ::testing::Environment* const kReleaseGpu =
    ::testing::AddGlobalTestEnvironment(new ReleaseGpu);

#define REQUIRE_GPU()                                                           \
  do {                                                                          \
    if (!backends().gpu) GTEST_SKIP() << "no CUDA backend: " << backends().why; \
  } while (0)

Backend& cpu() {
  return *backends().cpu;
}
Backend& gpu() {
  return *backends().gpu;
}

// Fresh inputs every run; the seed is printed with any failure and LINGBOT_TEST_SEED replays it.
class Rng {
 public:
  Rng() {
    const char* env = std::getenv("LINGBOT_TEST_SEED");
    state_ = env && *env ? std::strtoull(env, nullptr, 10)
                         : std::random_device{}() * 0x9E3779B97F4A7C15ull + 1;
    if (state_ == 0) state_ = 1;
  }
  uint64_t seed() const { return state_; }
  float uniform(float lo, float hi) {
    state_ ^= state_ >> 12;
    state_ ^= state_ << 25;
    state_ ^= state_ >> 27;
    const uint64_t r = state_ * 0x2545F4914F6CDD1Dull;
    return lo + (hi - lo) * static_cast<float>(r >> 40) * (1.0f / 16777216.0f);
  }
  Tensor tensor(const Shape& shape, float lo = -1.f, float hi = 1.f) {
    Tensor t = Tensor::zeros(shape);
    float* p = t.f32();
    for (int64_t i = 0; i < t.numel(); ++i) p[i] = uniform(lo, hi);
    return t;
  }

 private:
  uint64_t state_;
};

#define TRACE_SEED(rng) SCOPED_TRACE("rng seed " + std::to_string((rng).seed()))

// Host F32 copy with every value rounded to bf16 (what the GPU sees after upload as BF16).
Tensor round_bf16(const Tensor& t) {
  Tensor r = Tensor::zeros(t.shape());
  const float* s = t.f32();
  float* d = r.f32();
  for (int64_t i = 0; i < t.numel(); ++i) d[i] = bf16_to_f32(f32_to_bf16(s[i]));
  return r;
}
Tensor round_to(const Tensor& t, DType dt) {
  return dt == DType::BF16 ? round_bf16(t) : t;
}

Tensor poisoned(const Shape& shape, DType dt) {
  Tensor t = gpu().alloc(shape, dt);
  gpu().fill(t, NAN);
  return t;
}

double rel_err(const Tensor& got_device, const Tensor& want_host) {
  return test::compare(gpu().download(got_device), want_host).relative();
}

const char* act_name(Act a) {
  switch (a) {
    case Act::None:
      return "none";
    case Act::GELU:
      return "gelu";
    case Act::ReLU:
      return "relu";
    case Act::SiLU:
      return "silu";
    case Act::Exp:
      return "exp";
    case Act::ExpP1:
      return "expp1";
  }
  return "?";
}

// ------------------------------------------------------------------------------------------------

TEST(GpuOps, UploadDownloadRoundTrips) {
  REQUIRE_GPU();
  Rng rng;
  TRACE_SEED(rng);
  Tensor h = rng.tensor({3, 5, 7}, -100.f, 100.f);
  EXPECT_EQ(rel_err(gpu().upload(h, DType::F32), h), 0.0);
  EXPECT_EQ(rel_err(gpu().upload(h, DType::BF16), round_bf16(h)), 0.0);
  EXPECT_EQ(rel_err(gpu().upload(h, DType::F16), h.to(DType::F16).to(DType::F32)), 0.0);
  // Host BF16 uploads byte for byte.
  EXPECT_EQ(rel_err(gpu().upload(h.to(DType::BF16), DType::BF16), round_bf16(h)), 0.0);
  Tensor ints = Tensor::zeros({4}, DType::I32);
  for (int i = 0; i < 4; ++i) ints.data<int32_t>()[i] = i * 1000 - 7;
  Tensor back = gpu().download(gpu().upload(ints, DType::I32));
  for (int i = 0; i < 4; ++i) EXPECT_EQ(back.f32()[i], static_cast<float>(i * 1000 - 7));
  Tensor empty = gpu().upload(Tensor::zeros({0, 4}), DType::BF16);
  EXPECT_EQ(gpu().download(empty).numel(), 0);
}

// copy_ranges moves bytes as they are: ranges of any length at any byte offset (the 16-byte path
// and the byte path), more than one launch holds, a zero-length one; everything outside the
// ranges keeps its poison. Checked byte for byte against the same copies on the host.
TEST(GpuOps, CopyRangesMovesEveryRangeAndNothingElse) {
  REQUIRE_GPU();
  Rng rng;
  TRACE_SEED(rng);
  const int64_t floats = 1 << 18;
  const size_t total = floats * sizeof(float);
  Tensor src = gpu().upload(rng.tensor({floats}), DType::F32);
  Tensor dst = poisoned({floats}, DType::F32);
  Tensor want = gpu().download(src), have = gpu().download(dst);
  std::vector<char> expect(total);
  std::memcpy(expect.data(), have.raw(), total);
  std::vector<ByteRange> ranges;
  // Disjoint destinations: range i writes [i * slot, i * slot + bytes) with some offset.
  const size_t slot = total / 160 / 64 * 64;
  std::mt19937 pick(7);
  for (int i = 0; i < 150; ++i) {
    // Every fourth range is a cache row's 6144 bytes with both ends 16-byte aligned.
    const bool row = i % 4 == 0;
    const size_t bytes = i == 3 ? 0 : (row ? 6144 : pick() % (slot - 64));
    const size_t to = i * slot + (row ? 16 : pick() % 32);
    const size_t from = row ? pick() % ((total - bytes) / 16) * 16 : pick() % (total - bytes);
    ranges.push_back(
        {static_cast<const char*>(src.raw()) + from, static_cast<char*>(dst.raw()) + to, bytes});
    std::memcpy(expect.data() + to, static_cast<const char*>(want.raw()) + from, bytes);
  }
  gpu().copy_ranges(ranges);
  const Tensor got = gpu().download(dst);
  EXPECT_EQ(std::memcmp(got.raw(), expect.data(), total), 0);
  gpu().copy_ranges({});  // nothing to do
}

TEST(GpuOps, CopyConvertsAndFillWrites) {
  REQUIRE_GPU();
  Rng rng;
  TRACE_SEED(rng);
  Tensor h = rng.tensor({1001});
  Tensor src = gpu().upload(h, DType::F32);
  Tensor b = poisoned({1001}, DType::BF16);
  gpu().copy(src, b);
  EXPECT_EQ(rel_err(b, round_bf16(h)), 0.0);
  Tensor f = poisoned({7, 11, 13}, DType::F32);
  gpu().copy(b, f);
  EXPECT_EQ(rel_err(f, round_bf16(h)), 0.0);
  Tensor same = poisoned({1001}, DType::F32);
  gpu().copy(src, same);
  EXPECT_EQ(rel_err(same, h), 0.0);
  for (DType dt : {DType::F32, DType::BF16}) {
    Tensor t = poisoned({333}, dt);
    gpu().fill(t, 1.5f);
    Tensor d = gpu().download(t);
    for (int i = 0; i < 333; ++i) ASSERT_EQ(d.f32()[i], 1.5f);
  }
}

struct LinearCase {
  Shape x;  // leading dims and K
  int64_t n;
};

TEST(GpuOps, LinearF32MatchesCpu) {
  REQUIRE_GPU();
  Rng rng;
  TRACE_SEED(rng);
  const LinearCase cases[] = {{{1, 64}, 32}, {{37, 96}, 200}, {{2, 65, 256}, 384}, {{8, 1024}, 48}};
  for (const auto& c : cases) {
    for (Act act : {Act::None, Act::GELU, Act::ReLU, Act::SiLU}) {
      for (bool bias : {false, true}) {
        const int64_t k = c.x.back(), m = shape_numel(c.x) / k;
        SCOPED_TRACE(shape_str(c.x) + " n=" + std::to_string(c.n) + " act=" + act_name(act) +
                     (bias ? " bias" : ""));
        Tensor x = rng.tensor(c.x), w = rng.tensor({c.n, k}, -0.2f, 0.2f), b = rng.tensor({c.n});
        Tensor want = Tensor::zeros({m, c.n});
        cpu().linear(x, w, bias ? &b : nullptr, want, act);
        Tensor gx = gpu().upload(x, DType::F32), gw = gpu().upload(w, DType::F32);
        Tensor gb = gpu().upload(b, DType::F32);
        Tensor y = poisoned({m, c.n}, DType::F32);
        gpu().linear(gx, gw, bias ? &gb : nullptr, y, act);
        EXPECT_LT(rel_err(y, want), kTolF32);
      }
    }
  }
}

TEST(GpuOps, LinearBF16MatchesCpu) {
  REQUIRE_GPU();
  Rng rng;
  TRACE_SEED(rng);
  const LinearCase cases[] = {{{37, 96}, 200}, {{131, 256}, 384}, {{3, 5, 1024}, 64}};
  for (const auto& c : cases) {
    for (Act act : {Act::None, Act::GELU, Act::ReLU}) {
      for (DType ydt : {DType::BF16, DType::F32}) {
        for (DType bdt : {DType::F32, DType::BF16}) {
          const int64_t k = c.x.back(), m = shape_numel(c.x) / k;
          SCOPED_TRACE(shape_str(c.x) + " n=" + std::to_string(c.n) + " act=" + act_name(act) +
                       " y=" + dtype_name(ydt) + " bias=" + dtype_name(bdt));
          Tensor x = round_bf16(rng.tensor(c.x)), w = round_bf16(rng.tensor({c.n, k}, -.2f, .2f));
          Tensor b = round_to(rng.tensor({c.n}), bdt);
          Tensor want = Tensor::zeros({m, c.n});
          cpu().linear(x, w, &b, want, act);
          Tensor gx = gpu().upload(x, DType::BF16), gw = gpu().upload(w, DType::BF16);
          Tensor gb = gpu().upload(b, bdt);
          Tensor y = poisoned({m, c.n}, ydt);
          gpu().linear(gx, gw, &gb, y, act);
          // F32 output: exact bf16 products, fp32 sums; only the order differs.
          EXPECT_LT(rel_err(y, want), ydt == DType::F32 ? kTolF32 : kTolBF16);
        }
      }
    }
  }
  // An F32 activation into BF16 weights is rounded to bf16 first; an F32 weight with a BF16
  // output rounds once at the end.
  Tensor x = rng.tensor({19, 128}), w = round_bf16(rng.tensor({40, 128}, -.2f, .2f));
  Tensor want = Tensor::zeros({19, 40});
  cpu().linear(round_bf16(x), w, nullptr, want, Act::None);
  Tensor y = poisoned({19, 40}, DType::F32);
  gpu().linear(gpu().upload(x, DType::F32), gpu().upload(w, DType::BF16), nullptr, y, Act::None);
  EXPECT_LT(rel_err(y, want), kTolF32);
  cpu().linear(x, w, nullptr, want, Act::SiLU);
  Tensor yb = poisoned({19, 40}, DType::BF16);
  gpu().linear(gpu().upload(x, DType::F32), gpu().upload(w, DType::F32), nullptr, yb, Act::SiLU);
  EXPECT_LT(rel_err(yb, want), kTolBF16);
}

// One to a few rows (the camera head's one token per frame) take a bandwidth-bound kernel with
// the bias, activation and residual fused; more rows, or K not a multiple of 8, take cuBLASLt.
// Every dtype combination the model can hand it, odd N (tails of the per-block rows), M = 3.
TEST(GpuOps, FewRowLinearMatchesCpu) {
  REQUIRE_GPU();
  Rng rng;
  TRACE_SEED(rng);
  struct Case {
    int64_t m, k, n;
  };
  // n = 5: a last block with one row of w. Not n = 1: the error is relative to the largest
  // output, and a single output, a random sum, can cancel to nearly zero, where any difference
  // in summation order looks large.
  const Case cases[] = {{1, 2048, 1030}, {1, 16, 5}, {2, 72, 9}, {3, 1000, 129},
                        {4, 8192, 37},   {1, 9, 20}, {5, 64, 33}};
  const Act acts[] = {Act::None, Act::GELU, Act::SiLU, Act::ReLU};
  for (const Case& c : cases) {
    for (DType wdt : {DType::BF16, DType::F32}) {
      for (DType xdt : {DType::F32, DType::BF16}) {
        for (DType ydt : {DType::F32, DType::BF16}) {
          for (int bias = 0; bias < 3; ++bias) {             // none, F32, BF16
            for (int variant = 0; variant < 5; ++variant) {  // the four activations, then +=
              const bool accumulate = variant == 4;
              const Act act = accumulate ? Act::None : acts[variant];
              const DType bdt = bias == 2 ? DType::BF16 : DType::F32;
              SCOPED_TRACE("m=" + std::to_string(c.m) + " k=" + std::to_string(c.k) + " n=" +
                           std::to_string(c.n) + " w=" + dtype_name(wdt) + " x=" + dtype_name(xdt) +
                           " y=" + dtype_name(ydt) + " bias=" + (bias ? dtype_name(bdt) : "none") +
                           " " + (accumulate ? "+=" : act_name(act)));
              const Tensor x = round_to(rng.tensor({c.m, c.k}), xdt);
              const Tensor w = round_to(rng.tensor({c.n, c.k}, -.2f, .2f), wdt);
              const Tensor b = round_to(rng.tensor({c.n}), bdt);
              const Tensor* bp = bias ? &b : nullptr;
              // A bf16 weight meets its input rounded to bf16.
              const Tensor xc = round_to(x, wdt);
              Tensor want = Tensor::zeros({c.m, c.n});
              Tensor gb = gpu().upload(b, bdt);
              Tensor gx = gpu().upload(x, xdt), gw = gpu().upload(w, wdt);
              Tensor y;
              if (accumulate) {
                const Tensor y0 = round_to(rng.tensor({c.m, c.n}, -4.f, 4.f), ydt);
                cpu().copy(y0, want);
                cpu().linear_add(xc, w, bp, want);
                y = gpu().upload(y0, ydt);
                gpu().linear_add(gx, gw, bias ? &gb : nullptr, y);
              } else {
                cpu().linear(xc, w, bp, want, act);
                y = poisoned({c.m, c.n}, ydt);
                gpu().linear(gx, gw, bias ? &gb : nullptr, y, act);
              }
              EXPECT_LT(rel_err(y, want), ydt == DType::F32 ? kTolF32 : kTolBF16);
            }
          }
        }
      }
    }
  }
}

// layer_norm_linear on a few rows folds the norm into the GEMV: its output must be the bytes of
// layer_norm then linear (the same statistics and rounding by construction), at both row widths,
// with and without the norm's weight and bias, odd output counts; more rows take the two ops.
// Against the CPU: the norm in F32, rounded to bf16 for the bf16 weights.
TEST(GpuOps, LayerNormLinearFoldsTheNormIntoFewRows) {
  REQUIRE_GPU();
  Rng rng;
  TRACE_SEED(rng);
  for (int64_t m : {1, 2, 3, 4, 5}) {
    for (int64_t k : {1024, 2048}) {
      for (int variant = 0; variant < 3; ++variant) {  // affine + bias + GELU, affine, neither
        const int64_t n = variant == 2 ? 7 : 1003;
        const bool affine = variant < 2, bias = variant == 0;
        const Act act = variant == 0 ? Act::GELU : Act::None;
        SCOPED_TRACE("m=" + std::to_string(m) + " k=" + std::to_string(k) +
                     " variant=" + std::to_string(variant));
        const Tensor x = rng.tensor({m, k}, -2.f, 6.f);  // rows with a mean well off zero
        const Tensor g = rng.tensor({k}, .5f, 1.5f), h = rng.tensor({k});
        const Tensor w = round_bf16(rng.tensor({n, k}, -.2f, .2f)), b = rng.tensor({n});
        Tensor gx = gpu().upload(x, DType::F32), gw = gpu().upload(w, DType::BF16);
        Tensor gg = gpu().upload(g, DType::F32), gh = gpu().upload(h, DType::F32);
        Tensor gb = gpu().upload(b, DType::F32);
        const Tensor* pg = affine ? &gg : nullptr;
        const Tensor* ph = affine ? &gh : nullptr;
        const Tensor* pb = bias ? &gb : nullptr;
        Tensor normed = poisoned({m, k}, DType::F32), two = poisoned({m, n}, DType::F32);
        gpu().layer_norm(gx, pg, ph, 1e-5f, normed);
        gpu().linear(normed, gw, pb, two, act);
        Tensor scratch = poisoned({m, k}, DType::F32), one = poisoned({m, n}, DType::F32);
        gpu().layer_norm_linear(gx, pg, ph, 1e-5f, scratch, gw, pb, one, act);
        const Tensor a = gpu().download(one), c = gpu().download(two);
        EXPECT_EQ(std::memcmp(a.raw(), c.raw(), a.nbytes()), 0);
        Tensor hn = Tensor::zeros({m, k}), want = Tensor::zeros({m, n});
        cpu().layer_norm(x, affine ? &g : nullptr, affine ? &h : nullptr, 1e-5f, hn);
        cpu().linear(round_bf16(hn), w, bias ? &b : nullptr, want, act);
        EXPECT_LT(rel_err(one, want), kTolBF16);
      }
    }
  }
}

// y += x w^T + b: the residual update of a block. y starts from random values (an accumulating
// op cannot be poisoned); a missing product or bias shows as a difference from the CPU.
TEST(GpuOps, LinearAddMatchesCpu) {
  REQUIRE_GPU();
  Rng rng;
  TRACE_SEED(rng);
  const LinearCase cases[] = {
      {{1, 64}, 32}, {{37, 96}, 200}, {{3, 65, 256}, 72}, {{131, 1024}, 40}};
  for (const auto& c : cases) {
    // (weight, output, bias) dtypes: bf16 products into an F32 residual (the model), into a bf16
    // one, F32 throughout, and an F32 weight into a bf16 output (through an F32 temporary).
    const DType combos[][3] = {{DType::BF16, DType::F32, DType::F32},
                               {DType::BF16, DType::BF16, DType::F32},
                               {DType::F32, DType::F32, DType::F32},
                               {DType::F32, DType::BF16, DType::BF16}};
    for (const auto& dt : combos) {
      for (bool bias : {false, true}) {
        const DType wdt = dt[0], ydt = dt[1], bdt = dt[2];
        const int64_t k = c.x.back(), m = shape_numel(c.x) / k;
        SCOPED_TRACE(shape_str(c.x) + " n=" + std::to_string(c.n) + " w=" + dtype_name(wdt) +
                     " y=" + dtype_name(ydt) + (bias ? " bias=" : " no bias") +
                     (bias ? dtype_name(bdt) : ""));
        Tensor x = round_to(rng.tensor(c.x), wdt),
               w = round_to(rng.tensor({c.n, k}, -.2f, .2f), wdt);
        Tensor b = round_to(rng.tensor({c.n}), bdt);
        Tensor y0 = round_to(rng.tensor({m, c.n}, -4.f, 4.f), ydt);
        Tensor want = Tensor::zeros({m, c.n});
        cpu().copy(y0, want);
        cpu().linear_add(x, w, bias ? &b : nullptr, want);
        Tensor gb = gpu().upload(b, bdt);
        Tensor y = gpu().upload(y0, ydt);
        gpu().linear_add(gpu().upload(x, wdt), gpu().upload(w, wdt), bias ? &gb : nullptr, y);
        EXPECT_LT(rel_err(y, want), ydt == DType::F32 ? kTolF32 : kTolBF16);
      }
    }
  }
  // linear_add equals linear followed by add, in F32.
  Tensor x = rng.tensor({29, 48}), w = rng.tensor({33, 48}), b = rng.tensor({33});
  Tensor y0 = rng.tensor({29, 33});
  Tensor want = Tensor::zeros({29, 33});
  cpu().linear(x, w, &b, want, Act::None);
  cpu().add(want, y0);
  Tensor got = Tensor::zeros({29, 33});
  cpu().copy(y0, got);
  cpu().linear_add(x, w, &b, got);
  EXPECT_LT(test::compare(got, want).relative(), kTolF32);
  Tensor bad = gpu().alloc({29, 34}, DType::F32);
  EXPECT_THROW(
      gpu().linear_add(gpu().upload(x, DType::F32), gpu().upload(w, DType::F32), nullptr, bad),
      Error);
}

// The transformer's token GEMMs (M = 978) have the heuristic's candidates timed once per
// problem, and only candidates with the first choice's exact bits may be chosen: the results with
// tuning equal those without it bit for bit (each run makes its own plan, as the tuning switch
// is part of a plan's key), and match the CPU.
TEST(GpuOps, TunedLinearKeepsTheFirstChoicesBits) {
  REQUIRE_GPU();
  Rng rng;
  TRACE_SEED(rng);
  struct Case {
    int64_t k, n;
    Act act;
    bool add;
  };
  const int64_t m = 978;
  // qkv, fc1 + GELU, the projection and fc2 into the F32 residual.
  const Case cases[] = {{1024, 3072, Act::None, false},
                        {1024, 4096, Act::GELU, false},
                        {1024, 1024, Act::None, true},
                        {4096, 1024, Act::None, true}};
  for (const Case& c : cases) {
    SCOPED_TRACE("k=" + std::to_string(c.k) + " n=" + std::to_string(c.n));
    Tensor x = round_bf16(rng.tensor({m, c.k})),
           w = round_bf16(rng.tensor({c.n, c.k}, -.05f, .05f));
    Tensor b = rng.tensor({c.n}), y0 = rng.tensor({m, c.n}, -4.f, 4.f);
    Tensor gx = gpu().upload(x, DType::BF16), gw = gpu().upload(w, DType::BF16);
    Tensor gb = gpu().upload(b, DType::F32);
    const DType ydt = c.add ? DType::F32 : DType::BF16;
    Tensor got[2];
    for (int tuned = 0; tuned < 2; ++tuned) {
      switches().gemm_tune = tuned;
      got[tuned] = c.add ? gpu().upload(y0, ydt) : poisoned({m, c.n}, ydt);
      if (c.add)
        gpu().linear_add(gx, gw, &gb, got[tuned]);
      else
        gpu().linear(gx, gw, &gb, got[tuned], c.act);
    }
    switches().gemm_tune = true;
    const Tensor h0 = gpu().download(got[0]), h1 = gpu().download(got[1]);
    EXPECT_EQ(std::memcmp(h0.raw(), h1.raw(), h0.nbytes()), 0) << "tuned bits differ";
    Tensor want = Tensor::zeros({m, c.n});
    if (c.add) {
      cpu().copy(y0, want);
      cpu().linear_add(x, w, &b, want);
    } else {
      cpu().linear(x, w, &b, want, c.act);
    }
    EXPECT_LT(rel_err(got[1], want), c.add ? kTolF32 : kTolBF16);
  }
}

TEST(GpuOps, LayerNormMatchesCpu) {
  REQUIRE_GPU();
  Rng rng;
  TRACE_SEED(rng);
  struct Case {
    int64_t rows, n;
  };
  // Rows of 1024 and 2048 take the warp-per-row kernel (four rows a block: 2, 7 and 37 leave
  // a part-filled block); others are held in registers (4 or 8 values per thread, with and
  // without a ragged tail) or too long for that (the loop form).
  for (Case c : {Case{37, 1024}, Case{2, 1024}, Case{1, 64}, Case{5, 37}, Case{978, 1024},
                 Case{3, 1000}, Case{4, 300}, Case{7, 2048}, Case{2, 2100}, Case{2, 4100}}) {
    for (int affine = 0; affine < 3; ++affine) {  // none, weight only, weight and bias
      for (DType xdt : {DType::F32, DType::BF16}) {
        for (DType ydt : {DType::F32, DType::BF16}) {
          SCOPED_TRACE(std::to_string(c.rows) + "x" + std::to_string(c.n) + " affine " +
                       std::to_string(affine) + " " + dtype_name(xdt) + "->" + dtype_name(ydt));
          // An offset mean checks the centred variance.
          Tensor x = round_to(rng.tensor({c.rows, c.n}, 2.f, 5.f), xdt);
          Tensor w = round_to(rng.tensor({c.n}, 0.5f, 1.5f), xdt), b = rng.tensor({c.n});
          const Tensor* wp = affine >= 1 ? &w : nullptr;
          const Tensor* bp = affine >= 2 ? &b : nullptr;
          Tensor want = Tensor::zeros({c.rows, c.n});
          cpu().layer_norm(x, wp, bp, 1e-5f, want);
          Tensor gw = gpu().upload(w, xdt), gb = gpu().upload(b, DType::F32);
          Tensor y = poisoned({c.rows, c.n}, ydt);
          gpu().layer_norm(gpu().upload(x, xdt), affine >= 1 ? &gw : nullptr,
                           affine >= 2 ? &gb : nullptr, 1e-5f, y);
          EXPECT_LT(rel_err(y, want), ydt == DType::F32 ? kTolF32 : kTolBF16);
        }
      }
    }
  }
}

TEST(GpuOps, AddMatchesCpu) {
  REQUIRE_GPU();
  Rng rng;
  TRACE_SEED(rng);
  struct Case {
    Shape x, y;
    bool gamma;
    float alpha;
    DType ydt;
  };
  const Case cases[] = {{{37, 64}, {37, 64}, false, 1.f, DType::F32},
                        {{37, 64}, {37, 64}, true, 0.5f, DType::F32},
                        {{4, 9, 64}, {64}, true, 1.f, DType::F32},
                        {{3, 5, 7}, {5, 7}, false, -2.f, DType::F32},
                        {{978, 1024}, {978, 1024}, true, 1.f, DType::BF16},
                        {{31, 1024}, {31, 1024}, false, 1.f, DType::BF16}};
  for (const auto& c : cases) {
    SCOPED_TRACE(shape_str(c.x) + " += " + shape_str(c.y) + " " + dtype_name(c.ydt));
    Tensor x = rng.tensor(c.x), y = round_to(rng.tensor(c.y), c.ydt);
    Tensor g = round_to(rng.tensor({c.x.back()}), c.ydt);
    Tensor gx = gpu().upload(x, DType::F32), gg = gpu().upload(g, c.ydt);
    cpu().add(x, y, c.gamma ? &g : nullptr, c.alpha);
    gpu().add(gx, gpu().upload(y, c.ydt), c.gamma ? &gg : nullptr, c.alpha);
    EXPECT_LT(rel_err(gx, x), 1e-6);
  }
}

TEST(GpuOps, ActivateMatchesCpu) {
  REQUIRE_GPU();
  Rng rng;
  TRACE_SEED(rng);
  for (Act act : {Act::None, Act::GELU, Act::ReLU, Act::SiLU, Act::Exp, Act::ExpP1}) {
    for (DType dt : {DType::F32, DType::BF16}) {
      SCOPED_TRACE(std::string(act_name(act)) + " " + dtype_name(dt));
      Tensor x = round_to(rng.tensor({13, 77}, -6.f, 6.f), dt);
      Tensor gx = gpu().upload(x, dt);
      cpu().activate(x, act);
      gpu().activate(gx, act);
      EXPECT_LT(rel_err(gx, x), dt == DType::F32 ? kTolF32 : kTolBF16);
    }
  }
}

TEST(GpuOps, ConcatAndTransposeAreExact) {
  REQUIRE_GPU();
  Rng rng;
  TRACE_SEED(rng);
  for (DType dt : {DType::F32, DType::BF16}) {
    Tensor a = round_to(rng.tensor({2, 37, 24}), dt), b = round_to(rng.tensor({2, 37, 9}), dt);
    Tensor want = Tensor::zeros({2, 37, 33});
    cpu().concat_last(a, b, want);
    Tensor y = poisoned({2, 37, 33}, dt);
    gpu().concat_last(gpu().upload(a, dt), gpu().upload(b, dt), y);
    EXPECT_EQ(rel_err(y, want), 0.0);

    Tensor x = round_to(rng.tensor({3, 45, 70}), dt);
    Tensor wt = Tensor::zeros({3, 70, 45});
    cpu().transpose_last2(x, wt);
    Tensor yt = poisoned({3, 70, 45}, dt);
    gpu().transpose_last2(gpu().upload(x, dt), yt);
    EXPECT_EQ(rel_err(yt, wt), 0.0);
  }
}

TEST(GpuOps, SplitQkvMatchesCpu) {
  REQUIRE_GPU();
  Rng rng;
  TRACE_SEED(rng);
  struct Case {
    int64_t m;
    int h, d;
  };
  // Head sizes 32, 64 and 128 take the vectorized kernel (3 x 64 and 5 x 32 leave part of the
  // last warp idle); 48 the per-head fallback.
  for (Case c : {Case{37, 4, 64}, Case{1, 16, 64}, Case{9, 2, 128}, Case{5, 3, 64}, Case{7, 5, 32},
                 Case{3, 2, 48}, Case{978, 16, 64}}) {
    for (int variant = 0; variant < 4;
         ++variant) {  // plain, norm+halfsplit, norm+interleaved, rope only
      for (DType in_dt : {DType::F32, DType::BF16}) {
        for (DType out_dt : {DType::F32, DType::BF16}) {
          SCOPED_TRACE("m=" + std::to_string(c.m) + " h=" + std::to_string(c.h) +
                       " d=" + std::to_string(c.d) + " variant " + std::to_string(variant) + " " +
                       dtype_name(in_dt) + "->" + dtype_name(out_dt));
          const bool use_norm = variant == 1 || variant == 2;
          const bool use_rope = variant != 0;
          Tensor qkv = round_to(rng.tensor({c.m, 3 * c.h * c.d}, -2.f, 3.f), in_dt);
          Tensor qw = rng.tensor({c.d}, .5f, 1.5f), qb = rng.tensor({c.d});
          Tensor kw = rng.tensor({c.d}, .5f, 1.5f), kb = rng.tensor({c.d});
          Tensor ang = rng.tensor({c.m, c.d / 2}, -3.f, 3.f);
          Tensor cs = Tensor::zeros(ang.shape()), sn = Tensor::zeros(ang.shape());
          for (int64_t i = 0; i < ang.numel(); ++i) {
            cs.f32()[i] = std::cos(ang.f32()[i]);
            sn.f32()[i] = std::sin(ang.f32()[i]);
          }
          const RopePairs pairs = variant == 1 ? RopePairs::HalfSplit : RopePairs::Interleaved;
          QKNorm hn{&qw, &qb, &kw, &kb, 1e-5f};
          Rope hr{cs, sn, pairs};
          const Shape qs{c.m, c.h, c.d};
          Tensor q = Tensor::zeros(qs), k = Tensor::zeros(qs), v = Tensor::zeros(qs);
          cpu().split_qkv(qkv, use_norm ? &hn : nullptr, use_rope ? &hr : nullptr, q, k, v);

          Tensor gqw = gpu().upload(qw, DType::F32), gqb = gpu().upload(qb, DType::F32);
          Tensor gkw = gpu().upload(kw, DType::F32), gkb = gpu().upload(kb, DType::F32);
          QKNorm gn{&gqw, &gqb, &gkw, &gkb, 1e-5f};
          Rope gr{gpu().upload(cs, DType::F32), gpu().upload(sn, DType::F32), pairs};
          Tensor gq = poisoned(qs, out_dt), gk = poisoned(qs, out_dt), gv = poisoned(qs, out_dt);
          gpu().split_qkv(gpu().upload(qkv, in_dt), use_norm ? &gn : nullptr,
                          use_rope ? &gr : nullptr, gq, gk, gv);
          const double tol = out_dt == DType::F32 ? kTolF32 : kTolBF16;
          EXPECT_LT(rel_err(gq, q), tol);
          EXPECT_LT(rel_err(gk, k), tol);
          EXPECT_LT(rel_err(gv, v), tol);
        }
      }
    }
  }
}

// split_qkv straight into cache pages (the global blocks' path): the stored bytes are those of
// the split followed by store_kv, bit for bit, for e4m3 storage (each frame with its own scales,
// as frames of different sequences have) and for storage in the compute dtype; the pages around
// the frames' rows stay poisoned; q is the split's; and the values match the CPU's. Frames go
// to pages in scrambled order.
TEST(GpuOps, SplitQkvIntoCacheMatchesSplitThenStore) {
  REQUIRE_GPU();
  Rng rng;
  TRACE_SEED(rng);
  struct Case {
    int64_t frames, rows;
    int h, d;
  };
  for (Case c : {Case{3, 37, 16, 64}, Case{1, 978, 16, 64}, Case{5, 9, 2, 128}, Case{2, 7, 4, 32},
                 Case{17, 3, 2, 64}}) {  // 17 frames: more than the fused kernel takes
    for (DType store : {DType::F8E4M3, DType::BF16}) {
      for (bool rope : {false, true}) {
        SCOPED_TRACE("frames=" + std::to_string(c.frames) + " rows=" + std::to_string(c.rows) +
                     " h=" + std::to_string(c.h) + " d=" + std::to_string(c.d) + " into " +
                     dtype_name(store) + (rope ? " with norm and rope" : ""));
        const int64_t m = c.frames * c.rows, row = c.h * c.d;
        const Shape qs{m, c.h, c.d};
        Tensor qkv = round_bf16(rng.tensor({m, 3 * row}, -2.f, 3.f));
        Tensor qw = rng.tensor({c.d}, .5f, 1.5f), qb = rng.tensor({c.d});
        Tensor kw = rng.tensor({c.d}, .5f, 1.5f), kb = rng.tensor({c.d});
        Tensor ang = rng.tensor({m, c.d / 2}, -3.f, 3.f);
        Tensor cs = Tensor::zeros(ang.shape()), sn = Tensor::zeros(ang.shape());
        for (int64_t i = 0; i < ang.numel(); ++i) {
          cs.f32()[i] = std::cos(ang.f32()[i]);
          sn.f32()[i] = std::sin(ang.f32()[i]);
        }
        Tensor gqw = gpu().upload(qw, DType::F32), gqb = gpu().upload(qb, DType::F32);
        Tensor gkw = gpu().upload(kw, DType::F32), gkb = gpu().upload(kb, DType::F32);
        QKNorm gn{&gqw, &gqb, &gkw, &gkb, 1e-5f};
        Rope gr{gpu().upload(cs, DType::F32), gpu().upload(sn, DType::F32), RopePairs::Interleaved};
        const QKNorm* norm = rope ? &gn : nullptr;
        const Rope* rp = rope ? &gr : nullptr;
        const Tensor gqkv = gpu().upload(qkv, DType::BF16);

        // The reference: split, then a store per frame, each frame with scales of its own.
        Tensor q0 = poisoned(qs, DType::BF16), k0 = poisoned(qs, DType::BF16);
        Tensor v0 = poisoned(qs, DType::BF16);
        gpu().split_qkv(gqkv, norm, rp, q0, k0, v0);
        const bool f8 = store == DType::F8E4M3;
        std::vector<Tensor> scales;
        for (int64_t f = 0; f < c.frames; ++f) {
          scales.push_back(poisoned({2, c.h}, DType::F32));
          // Scales from a neighbouring frame's rows, so some values saturate.
          const int64_t g = (f + 1) % c.frames;
          gpu().fp8_kv_scales(k0.slice(g * c.rows, (g + 1) * c.rows),
                              v0.slice(g * c.rows, (g + 1) * c.rows), scales.back());
        }
        // Pages: frame f at page (frames - 1 - f) of a pool with one spare page on each side.
        const int64_t page = c.rows * row * dtype_size(store);
        const int64_t words = (c.frames + 2) * page / 4;
        auto pool = [&] { return poisoned({words}, DType::F32); };
        Tensor want_k = pool(), want_v = pool(), got_k = pool(), got_v = pool();
        auto at = [&](Tensor& t, int64_t f) {
          return static_cast<char*>(t.raw()) + (c.frames - f) * page;
        };
        KVDestination into;
        into.rows_per_frame = c.rows;
        into.dtype = store;
        for (int64_t f = 0; f < c.frames; ++f) {
          gpu().store_kv(k0.slice(f * c.rows, (f + 1) * c.rows),
                         v0.slice(f * c.rows, (f + 1) * c.rows), at(want_k, f), at(want_v, f),
                         store, f8 ? &scales[f] : nullptr);
          into.frames.push_back({at(got_k, f), at(got_v, f), f8 ? &scales[f] : nullptr});
        }
        Tensor q1 = poisoned(qs, DType::BF16), k1 = poisoned(qs, DType::BF16);
        Tensor v1 = poisoned(qs, DType::BF16);
        gpu().split_qkv(gqkv, norm, rp, q1, k1, v1, &into);

        const Tensor hq0 = gpu().download(q0), hq1 = gpu().download(q1);
        EXPECT_EQ(std::memcmp(hq0.raw(), hq1.raw(), hq0.nbytes()), 0) << "q differs";
        for (const auto& [want, got] : {std::pair{&want_k, &got_k}, std::pair{&want_v, &got_v}}) {
          const Tensor w = gpu().download(*want), g = gpu().download(*got);
          EXPECT_EQ(std::memcmp(w.raw(), g.raw(), w.nbytes()), 0)
              << (want == &want_k ? "K" : "V") << " bytes differ from split + store";
          EXPECT_TRUE(std::isnan(g.f32()[page / 4 - 1]) &&
                      std::isnan(g.f32()[(c.frames + 1) * page / 4]))
              << "split_qkv wrote outside the frames' rows";
        }

        // Against the CPU: its split in F32 with the same rounding to bf16 the GPU does, then
        // (e4m3) the stored values times their scale; the e4m3 rounding is up to 2^-4 of a value.
        Tensor q = Tensor::zeros(qs), k = Tensor::zeros(qs), v = Tensor::zeros(qs);
        QKNorm hn{&qw, &qb, &kw, &kb, 1e-5f};
        Rope hr{cs, sn, RopePairs::Interleaved};
        cpu().split_qkv(qkv, rope ? &hn : nullptr, rope ? &hr : nullptr, q, k, v);
        const Tensor hk = gpu().download(got_k);
        Tensor stored_k = Tensor::zeros(qs);
        for (int64_t f = 0; f < c.frames; ++f) {
          const Tensor sc = gpu().download(scales[f]);
          const char* src = static_cast<const char*>(hk.raw()) + (c.frames - f) * page;
          for (int64_t i = 0; i < c.rows * row; ++i) {
            const int64_t e = f * c.rows * row + i;
            stored_k.f32()[e] =
                f8 ? f8e4m3_to_f32(static_cast<const uint8_t*>(static_cast<const void*>(src))[i]) *
                         sc.f32()[(i / c.d) % c.h]
                   : bf16_to_f32(reinterpret_cast<const uint16_t*>(src)[i]);
          }
        }
        if (f8) {
          // Saturated values (beyond 448 times the scale) are left out of the comparison.
          for (int64_t f = 0; f < c.frames; ++f) {
            const Tensor sc = gpu().download(scales[f]);
            for (int64_t i = 0; i < c.rows * row; ++i) {
              const int64_t e = f * c.rows * row + i;
              if (std::fabs(k.f32()[e]) > 448.f * sc.f32()[(i / c.d) % c.h])
                k.f32()[e] = stored_k.f32()[e];
            }
          }
        }
        EXPECT_LT(test::compare(stored_k, k).relative(), f8 ? 6.5e-2 : kTolBF16);
      }
    }
  }
}

TEST(GpuOps, StoreKvConvertsIntoCacheStorage) {
  REQUIRE_GPU();
  Rng rng;
  TRACE_SEED(rng);
  for (DType act : {DType::F32, DType::BF16}) {
    for (DType store : {DType::F32, DType::BF16}) {
      SCOPED_TRACE(std::string(dtype_name(act)) + " into " + dtype_name(store));
      Tensor k = round_to(rng.tensor({7, 4, 64}), act), v = round_to(rng.tensor({7, 4, 64}), act);
      Tensor pool_k = poisoned({20, 4, 64}, store), pool_v = poisoned({20, 4, 64}, store);
      const size_t row = 4 * 64 * dtype_size(store);
      gpu().store_kv(gpu().upload(k, act), gpu().upload(v, act),
                     static_cast<char*>(pool_k.raw()) + 5 * row,
                     static_cast<char*>(pool_v.raw()) + 5 * row, store);
      Tensor hk = gpu().download(pool_k), hv = gpu().download(pool_v);
      EXPECT_EQ(test::compare(hk.slice(5, 12), round_to(k, store)).relative(), 0.0);
      EXPECT_EQ(test::compare(hv.slice(5, 12), round_to(v, store)).relative(), 0.0);
      EXPECT_TRUE(std::isnan(hk.f32()[0]) && std::isnan(hk.f32()[12 * 4 * 64]))
          << "store_kv wrote outside its rows";
    }
  }
}

// ------------------------------------------------------------------------------------------------
// Attention. A KV set is built as host F32 segments (the CPU reference reads them in place) and
// device segments of the storage dtype, some written through store_kv into a page pool in
// scrambled page order and some through KVStream, as the model does.

struct KvSet {
  int h = 0, d = 0;
  DType dt = DType::BF16;
  // Per segment [tokens, h, d]: F32 already rounded, or for F8E4M3 storage the e4m3 bytes the
  // CPU stored (the GPU's own store_kv writes the device copies from the same F32 rows).
  std::vector<Tensor> host_k, host_v;
  Tensor host_scales, dev_scales;  // F8E4M3: [2, h], from the first segment's rows
  std::vector<KVSegment> host_segs, dev_segs;
  std::vector<Tensor> keep;  // device memory the segments point into
  std::vector<std::unique_ptr<KVStream>> streams;
  int64_t keys = 0;
};

// Segment kinds: 'p' = a page of a pool written by store_kv, 's' = a KVStream (appended in
// frames of `frame` rows), 'd' = its own device tensor. `kmul` scales this segment's keys.
struct SegSpec {
  char kind;
  int64_t tokens;
  int64_t frame = 0;
  float kmul = 1.f;
};

KvSet make_kv(Rng& rng, int h, int d, DType dt, const std::vector<SegSpec>& specs, float kscale) {
  KvSet s;
  s.h = h;
  s.d = d;
  s.dt = dt;
  // One pool holds every 'p' page, in reverse order (like the reference's LIFO page free list).
  int64_t pool_pages = 0, page_tokens = 0;
  for (const auto& sp : specs)
    if (sp.kind == 'p') {
      ++pool_pages;
      page_tokens = std::max(page_tokens, sp.tokens);
    }
  Tensor pool_k, pool_v;
  if (pool_pages) {
    pool_k = gpu().alloc({pool_pages * page_tokens, h, d}, dt);
    pool_v = gpu().alloc({pool_pages * page_tokens, h, d}, dt);
    s.keep.push_back(pool_k);
    s.keep.push_back(pool_v);
  }
  const size_t row_bytes = static_cast<size_t>(h) * d * dtype_size(dt);
  const bool f8 = dt == DType::F8E4M3;
  const Tensor* dev_scales = nullptr;
  int64_t next_page = pool_pages - 1;
  for (const auto& sp : specs) {
    Tensor k = rng.tensor({sp.tokens, h, d}, -kscale * sp.kmul, kscale * sp.kmul);
    Tensor v = rng.tensor({sp.tokens, h, d});
    const int32_t n = static_cast<int32_t>(sp.tokens);
    if (f8) {
      if (!s.host_scales.defined()) {
        s.host_scales = Tensor::zeros({2, h});
        cpu().fp8_kv_scales(k, v, s.host_scales);
        s.dev_scales = gpu().upload(s.host_scales, DType::F32);
        dev_scales = &s.dev_scales;
      }
      Tensor k8 = Tensor::zeros(k.shape(), DType::F8E4M3), v8 = Tensor::zeros(k.shape(), dt);
      cpu().store_kv(k, v, k8.raw(), v8.raw(), dt, &s.host_scales);
      s.host_k.push_back(k8);
      s.host_v.push_back(v8);
      s.host_segs.push_back({k8.raw(), v8.raw(), n, s.host_scales.f32()});
    } else {
      k = round_to(k, dt);
      v = round_to(v, dt);
      s.host_k.push_back(k);
      s.host_v.push_back(v);
      s.host_segs.push_back({k.raw(), v.raw(), n});
    }
    s.keys += sp.tokens;
    const float* ds = f8 ? s.dev_scales.f32() : nullptr;
    if (sp.kind == 'p') {
      const size_t at = static_cast<size_t>(next_page--) * page_tokens * row_bytes;
      char* kd = static_cast<char*>(pool_k.raw()) + at;
      char* vd = static_cast<char*>(pool_v.raw()) + at;
      gpu().store_kv(gpu().upload(k, DType::F32), gpu().upload(v, DType::F32), kd, vd, dt,
                     dev_scales);
      s.dev_segs.push_back({kd, vd, n, ds});
    } else if (sp.kind == 's') {
      auto stream = std::make_unique<KVStream>(gpu(), h, d, dt, 512);
      Tensor gk = gpu().upload(k, DType::F32), gv = gpu().upload(v, DType::F32);
      if (f8) {  // the cache moves stored e4m3 rows into its stream
        Tensor k8 = gpu().alloc(k.shape(), dt), v8 = gpu().alloc(k.shape(), dt);
        gpu().store_kv(gk, gv, k8.raw(), v8.raw(), dt, dev_scales);
        gk = k8;
        gv = v8;
      }
      for (int64_t r = 0; r < sp.tokens; r += sp.frame) {
        const int64_t e = std::min(sp.tokens, r + sp.frame);
        stream->append(gk.slice(r, e), gv.slice(r, e));
      }
      const size_t first = s.dev_segs.size();
      stream->segments(s.dev_segs);
      for (size_t i = first; i < s.dev_segs.size(); ++i) s.dev_segs[i].scales = ds;
      s.streams.push_back(std::move(stream));
    } else {
      Tensor gk, gv;
      if (f8) {
        gk = gpu().alloc(k.shape(), dt);
        gv = gpu().alloc(k.shape(), dt);
        gpu().store_kv(gpu().upload(k, DType::F32), gpu().upload(v, DType::F32), gk.raw(), gv.raw(),
                       dt, dev_scales);
      } else {
        gk = gpu().upload(k, dt);
        gv = gpu().upload(v, dt);
      }
      s.keep.push_back(gk);
      s.keep.push_back(gv);
      s.dev_segs.push_back({gk.raw(), gv.raw(), n, ds});
    }
  }
  return s;
}

// The kernels a bf16 head_dim-64 call can take: mma.sync everywhere, and the wgmma kernel on
// compute capability 9.0 (the backend's name ends in "sm_90)"; not on the portable path).
// e4m3 K/V: mma.sync (widened to bf16) and, on sm_90, wgmma (S on e4m3).
struct AttnVariant {
  const char* impl;  // BackendSwitches::attn_impl (LINGBOT_ATTN_IMPL)
};
std::vector<AttnVariant> attention_variants(const KvSet& kv) {
  // Without tensor cores the default may be the row kernel (few queries); the generic kernel
  // is then compared too.
  const bool hopper = gpu().name().find(", sm_90)") != std::string::npos;
  if (kv.dt == DType::F8E4M3) {
    std::vector<AttnVariant> v = {{"mma"}};
    if (hopper) v.push_back({"wgmma"});
    return v;
  }
  if (kv.dt != DType::BF16 || kv.d != 64) return {{"default"}, {"generic"}};
  std::vector<AttnVariant> v = {{"mma"}};
  if (hopper) v.push_back({"wgmma"});
  return v;
}

// Queries [n, h, d] as the attention kernel's e4m3 S uses them: each (row, head) slice scaled by
// the power of two 2^k that takes its largest |value| closest to 448 without passing it, rounded to
// e4m3 (nearest even, saturating) and scaled back.
Tensor e4m3_queries(const Tensor& q, int d) {
  Tensor out = Tensor::zeros(q.shape());
  const float* src = q.f32();
  float* dst = out.f32();
  for (int64_t r = 0; r < q.numel() / d; ++r) {
    float amax = 0.f;
    for (int i = 0; i < d; ++i) amax = std::max(amax, std::fabs(src[r * d + i]));
    int k = 0;
    if (amax > 0.f) {
      uint32_t u;
      std::memcpy(&u, &amax, 4);
      const int e = static_cast<int>((u >> 23) & 0xff) - 127;
      k = std::clamp(((u & 0x7fffff) <= 0x600000 ? 8 : 7) - e, -126, 126);
    }
    for (int i = 0; i < d; ++i)
      dst[r * d + i] = std::ldexp(f8e4m3_to_f32(f32_to_f8e4m3(std::ldexp(src[r * d + i], k))), -k);
  }
  return out;
}

// Runs the GPU on all queries and the CPU on `rows` (all when empty), and compares those rows.
// Every kernel variant that can serve the call runs and is compared.
void check_attention(Rng& rng, const KvSet& kv, int64_t nq, DType out_dt, double tol,
                     std::vector<int64_t> rows = {}, float qscale = 1.f) {
  const int h = kv.h, d = kv.d;
  const float scale = 1.f / std::sqrt(static_cast<float>(d));
  const DType qdt = kv.dt == DType::F8E4M3 ? DType::BF16 : kv.dt;  // e4m3 K/V: bf16 queries
  Tensor q = round_to(rng.tensor({nq, h, d}, -qscale, qscale), qdt);
  Tensor gq = gpu().upload(q, qdt);
  const auto variants = attention_variants(kv);
  std::vector<Tensor> outs;
  const std::string impl = switches().attn_impl;
  for (const auto& v : variants) {
    switches().attn_impl = v.impl;
    Tensor out = poisoned({nq, h, d}, out_dt);
    gpu().attention(gq, kv.dev_segs, scale, out);
    outs.push_back(gpu().download(out));
  }
  switches().attn_impl = impl;

  if (rows.empty()) {
    rows.resize(nq);
    std::iota(rows.begin(), rows.end(), 0);
  }
  const int64_t nr = static_cast<int64_t>(rows.size()), row = int64_t(h) * d;
  Tensor qs = Tensor::zeros({nr, h, d});
  for (int64_t i = 0; i < nr; ++i)
    std::memcpy(qs.f32() + i * row, q.f32() + rows[i] * row, row * 4);
  // e4m3 K/V: the wgmma kernel computes S on e4m3 queries, so the CPU gets the same queries for
  // it; the mma.sync kernel keeps the bf16 queries.
  const bool e4m3 = kv.dt == DType::F8E4M3;
  Tensor want = Tensor::zeros({nr, h, d}), want_e4m3q;
  cpu().attention(qs, kv.host_segs, scale, want);
  for (size_t v = 0; v < outs.size(); ++v) {
    const Tensor& got = outs[v];
    const bool e4m3_queries_used = e4m3 && std::strcmp(variants[v].impl, "wgmma") == 0;
    if (e4m3_queries_used && !want_e4m3q.defined()) {
      want_e4m3q = Tensor::zeros({nr, h, d});
      cpu().attention(e4m3_queries(qs, d), kv.host_segs, scale, want_e4m3q);
    }
    Tensor gs = Tensor::zeros({nr, h, d});
    for (int64_t i = 0; i < nr; ++i)
      std::memcpy(gs.f32() + i * row, got.f32() + rows[i] * row, row * 4);
    const auto a = test::compare(gs, e4m3_queries_used ? want_e4m3q : want);
    EXPECT_LT(a.relative(), tol) << "nq=" << nq << " keys=" << kv.keys
                                 << " segments=" << kv.dev_segs.size() << " kernel "
                                 << variants[v].impl << " max|ref|=" << a.max_abs_ref;
    // Rows outside the checked subset must still have been written.
    for (int64_t i = 0; i < got.numel(); ++i)
      ASSERT_TRUE(std::isfinite(got.f32()[i]))
          << "unwritten output element " << i << " kernel " << variants[v].impl;
  }
}

std::vector<int64_t> spread_rows(int64_t nq, int64_t head, int64_t tail) {
  std::vector<int64_t> r;
  for (int64_t i = 0; i < std::min(head, nq); ++i) r.push_back(i);
  for (int64_t i = std::max(head, nq - tail); i < nq; ++i) r.push_back(i);
  return r;
}

TEST(GpuOps, AttentionF32SmallAndOdd) {
  REQUIRE_GPU();
  Rng rng;
  TRACE_SEED(rng);
  check_attention(rng, make_kv(rng, 2, 64, DType::F32, {{'d', 26}}, 1.f), 7, DType::F32, kTolF32);
  check_attention(rng, make_kv(rng, 3, 64, DType::F32, {{'d', 1}}, 1.f), 1, DType::F32, kTolF32);
  check_attention(rng,
                  make_kv(rng, 16, 64, DType::F32,
                          {{'d', 5}, {'p', 972}, {'d', 1}, {'s', 300, 6}, {'d', 978}}, 2.f),
                  37, DType::F32, kTolF32, {}, 3.f);
}

TEST(GpuOps, AttentionF32OtherHeadDims) {
  REQUIRE_GPU();
  Rng rng;
  TRACE_SEED(rng);
  check_attention(rng, make_kv(rng, 4, 128, DType::F32, {{'d', 40}, {'s', 66, 6}, {'d', 9}}, 1.f),
                  9, DType::F32, kTolF32, {}, 2.f);
  check_attention(rng, make_kv(rng, 2, 32, DType::F32, {{'d', 700}, {'d', 3}}, 1.f), 5, DType::F32,
                  kTolF32);
  check_attention(rng, make_kv(rng, 1, 256, DType::F32, {{'d', 50}, {'d', 21}}, 1.f), 3, DType::F32,
                  kTolF32);
  // A head size that is not a multiple of four merges its splits one value per thread.
  switches().attn_splits = 2;
  check_attention(rng, make_kv(rng, 3, 30, DType::F32, {{'d', 300}, {'d', 7}}, 1.f), 11, DType::F32,
                  kTolF32);
  switches().attn_splits = 0;
}

TEST(GpuOps, AttentionBF16OneFrame) {
  REQUIRE_GPU();
  Rng rng;
  TRACE_SEED(rng);
  // Frame attention: 978 queries over the frame's own 978 keys, all rows checked.
  check_attention(rng, make_kv(rng, 16, 64, DType::BF16, {{'d', 978}}, 1.f), 978, DType::BF16,
                  kTolAttnBF16, spread_rows(978, 200, 100), 3.f);
}

TEST(GpuOps, AttentionBF16TinyAndOdd) {
  REQUIRE_GPU();
  Rng rng;
  TRACE_SEED(rng);
  for (DType out : {DType::BF16, DType::F32}) {
    SCOPED_TRACE(dtype_name(out));
    check_attention(rng, make_kv(rng, 16, 64, DType::BF16, {{'d', 26}}, 1.f), 1, out, kTolAttnBF16);
    check_attention(rng, make_kv(rng, 3, 64, DType::BF16, {{'d', 3}, {'d', 61}, {'d', 36}}, 1.f),
                    37, out, kTolAttnBF16, {}, 4.f);
    check_attention(rng, make_kv(rng, 2, 64, DType::BF16, {{'d', 130}, {'s', 66, 6}}, 1.f), 65, out,
                    kTolAttnBF16, {}, 2.f);
  }
}

TEST(GpuOps, AttentionBF16EightFrames) {
  REQUIRE_GPU();
  Rng rng;
  TRACE_SEED(rng);
  // Phase 1: 8 frames attend to all 8 frames.
  std::vector<SegSpec> specs(8, SegSpec{'d', 978});
  check_attention(rng, make_kv(rng, 16, 64, DType::BF16, specs, 1.f), 8 * 978, DType::BF16,
                  kTolAttnBF16, spread_rows(8 * 978, 24, 40), 3.f);
}

std::vector<SegSpec> streaming_cache(int scale_pages, int window_pages, int special_frames) {
  std::vector<SegSpec> specs;
  for (int i = 0; i < scale_pages + window_pages; ++i) specs.push_back({'p', 972});
  if (special_frames) specs.push_back({'s', 6LL * special_frames, 6});
  specs.push_back({'d', 978});  // the current frame
  return specs;
}

TEST(GpuOps, AttentionBF16PagedStreamingCache) {
  REQUIRE_GPU();
  Rng rng;
  TRACE_SEED(rng);
  // Full window: 8 scale pages + 64 window pages + specials of 200 evicted frames + current
  // frame = 72,162 keys in 77 segments (the special stream spans 3 chunks of 512 rows).
  KvSet kv = make_kv(rng, 16, 64, DType::BF16, streaming_cache(8, 64, 200), 1.f);
  EXPECT_EQ(kv.keys, 72 * 972 + 1200 + 978);
  check_attention(rng, kv, 978, DType::BF16, kTolAttnBF16, spread_rows(978, 16, 20), 3.f);
  // Peaky softmax: large logits stress the running-max rescaling across tiles and splits.
  check_attention(rng, kv, 978, DType::BF16, kTolAttnBF16, spread_rows(978, 8, 8), 12.f);
  // A few queries over the whole window: one query tile, the key splits fill the GPU.
  check_attention(rng, kv, 26, DType::BF16, kTolAttnBF16, {}, 3.f);
  // Early stream: 8 scale pages + a few window pages, no specials yet.
  check_attention(rng, make_kv(rng, 16, 64, DType::BF16, streaming_cache(8, 3, 0), 1.f), 978,
                  DType::F32, kTolAttnBF16, spread_rows(978, 16, 16), 3.f);
}

TEST(GpuOps, AttentionBF16ScoresJumpLateOrEarly) {
  REQUIRE_GPU();
  Rng rng;
  TRACE_SEED(rng);
  // The current frame's keys score far above the cached ones (about 30 log2 units): the running
  // maximum must move late in the key range, past the wgmma kernel's 2^8 slack, within each key
  // split and in the merge.
  std::vector<SegSpec> late = streaming_cache(8, 4, 20);
  late.back().kmul = 8.f;
  KvSet kv = make_kv(rng, 16, 64, DType::BF16, late, 1.f);
  check_attention(rng, kv, 978, DType::BF16, kTolAttnBF16, spread_rows(978, 16, 16), 3.f);
  check_attention(rng, kv, 26, DType::F32, kTolAttnBF16, {}, 3.f);
  // A jump of about 100 log2 units: probabilities against the old maximum would overflow.
  late.back().kmul = 24.f;
  check_attention(rng, make_kv(rng, 16, 64, DType::BF16, late, 1.f), 978, DType::BF16, kTolAttnBF16,
                  spread_rows(978, 16, 16), 3.f);
  // The first page scores highest: later tiles only add terms far below the running maximum.
  std::vector<SegSpec> early = streaming_cache(8, 4, 20);
  early.front().kmul = 8.f;
  check_attention(rng, make_kv(rng, 16, 64, DType::BF16, early, 1.f), 978, DType::BF16,
                  kTolAttnBF16, spread_rows(978, 16, 16), 3.f);
}

// 79 segments: 70 short ones of 1 to 61 keys (shorter than any tile) between pages of 972, a
// special-token stream and the current frame. Tiles straddle many segment boundaries and some
// tiles span several segments.
std::vector<SegSpec> ragged_cache();

// e4m3 K/V (the fp8 KV cache) on every kernel that reads it (mma.sync everywhere, wgmma on
// Hopper) against the CPU attention over the same bytes and scales: the whole window with the
// special stream, ragged segments, a late score jump (keys past the scales' headroom saturate the
// same way on both), single rows.
TEST(GpuOps, AttentionFp8MatchesTheCpuOnTheSameBytes) {
  REQUIRE_GPU();
  Rng rng;
  TRACE_SEED(rng);
  const DType f8 = DType::F8E4M3;
  KvSet full = make_kv(rng, 16, 64, f8, streaming_cache(8, 64, 200), 1.f);
  check_attention(rng, full, 978, DType::BF16, kTolAttnBF16, spread_rows(978, 16, 20), 3.f);
  KvSet ragged = make_kv(rng, 16, 64, f8, ragged_cache(), 1.f);
  check_attention(rng, ragged, 978, DType::BF16, kTolAttnBF16, spread_rows(978, 24, 24), 3.f);
  check_attention(rng, ragged, 5, DType::F32, kTolAttnBF16, {}, 3.f);
  std::vector<SegSpec> late = streaming_cache(8, 4, 20);
  late.back().kmul = 8.f;
  check_attention(rng, make_kv(rng, 16, 64, f8, late, 1.f), 978, DType::BF16, kTolAttnBF16,
                  spread_rows(978, 16, 16), 3.f);
  // Peaky scores, a jump of ~100 log2 units late, the highest scores first: the fp16
  // probabilities' overflow guard (2^15) and the running maximum's moves.
  check_attention(rng, full, 978, DType::BF16, kTolAttnBF16, spread_rows(978, 8, 8), 12.f);
  late.back().kmul = 24.f;
  check_attention(rng, make_kv(rng, 16, 64, f8, late, 1.f), 978, DType::BF16, kTolAttnBF16,
                  spread_rows(978, 16, 16), 3.f);
  std::vector<SegSpec> early = streaming_cache(8, 4, 20);
  early.front().kmul = 8.f;
  check_attention(rng, make_kv(rng, 16, 64, f8, early, 1.f), 978, DType::BF16, kTolAttnBF16,
                  spread_rows(978, 16, 16), 3.f);
  check_attention(rng, make_kv(rng, 3, 64, f8, {{'d', 1}}, 1.f), 1, DType::F32, kTolAttnBF16);
  check_attention(rng, make_kv(rng, 2, 64, f8, {{'d', 26}, {'s', 12, 6}, {'d', 3}}, 1.f), 7,
                  DType::BF16, kTolAttnBF16);
}

// The mma.sync kernel's e4m3 loads at odd shapes (table below): head counts that are not powers
// of two, key counts around the 64-key tile and the 16-byte chunk, query counts around the 16-
// and 128-row tiles, several segments of odd lengths (tiles straddling them), forced key splits
// (the V scale before the merge), both output dtypes. Poisoned outputs, every row checked against
// the CPU over the same bytes and scales.
TEST(GpuOps, AttentionFp8MmaOddShapes) {
  REQUIRE_GPU();
  Rng rng;
  TRACE_SEED(rng);
  struct Case {
    int heads;
    std::vector<SegSpec> segs;
    int64_t nq;
    DType out;
    float qscale;
    int splits;  // BackendSwitches::attn_splits, 0: automatic
  };
  const std::vector<Case> cases = {
      {1, {{'d', 1}}, 1, DType::F32, 1.f, 0},
      {3, {{'d', 63}}, 17, DType::BF16, 2.f, 0},
      {5, {{'d', 65}, {'d', 1}}, 129, DType::F32, 3.f, 0},
      {7, {{'d', 17}, {'s', 30, 6}, {'d', 47}}, 33, DType::BF16, 3.f, 2},
      {2, {{'p', 200}, {'p', 200}, {'d', 99}}, 250, DType::F32, 4.f, 3},
      {16, {{'p', 972}, {'d', 5}, {'p', 972}, {'d', 978}}, 978, DType::BF16, 3.f, 7},
      {4, {{'d', 129}, {'d', 2}, {'d', 31}}, 16, DType::F32, 12.f, 0},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    SCOPED_TRACE("case " + std::to_string(i));
    const int splits = switches().attn_splits;
    switches().attn_splits = c.splits;
    check_attention(rng, make_kv(rng, c.heads, 64, DType::F8E4M3, c.segs, 1.f), c.nq, c.out,
                    kTolAttnBF16, {}, c.qscale);
    switches().attn_splits = splits;
  }
}

// Scales and stored bytes are the CPU's, bit for bit, from F32 and from bf16 rows; the store
// writes its rows and nothing around them.
TEST(GpuOps, Fp8ScalesAndStoreMatchTheCpu) {
  REQUIRE_GPU();
  Rng rng;
  TRACE_SEED(rng);
  for (DType act : {DType::F32, DType::BF16}) {
    SCOPED_TRACE(dtype_name(act));
    const int64_t n = 37, h = 16, d = 64, row = h * d;
    Tensor k = round_to(rng.tensor({n, h, d}, -3.f, 3.f), act);
    Tensor v = round_to(rng.tensor({n, h, d}, -0.02f, 0.02f), act);
    Tensor want_scales = Tensor::zeros({2, h});
    cpu().fp8_kv_scales(k, v, want_scales);
    Tensor got_scales = poisoned({2, h}, DType::F32);
    Tensor gk = gpu().upload(k, act), gv = gpu().upload(v, act);
    gpu().fp8_kv_scales(gk, gv, got_scales);
    Tensor gs = gpu().download(got_scales);
    ASSERT_EQ(std::memcmp(gs.raw(), want_scales.raw(), gs.nbytes()), 0);
    // Later rows use the first rows' scales: some saturate.
    Tensor k2 = round_to(rng.tensor({n, h, d}, -80.f, 80.f), act);
    for (const Tensor* rows : {&k, &k2}) {
      std::vector<uint8_t> want_k(n * row), want_v(n * row);
      cpu().store_kv(*rows, v, want_k.data(), want_v.data(), DType::F8E4M3, &want_scales);
      // Byte storage inside poisoned F32 buffers (NaN: bytes 00 00 c0 7f), 5 rows in.
      const int64_t words = (n + 10) * row / 4;
      Tensor pk = poisoned({words}, DType::F32), pv = poisoned({words}, DType::F32);
      gpu().store_kv(gpu().upload(*rows, act), gv, static_cast<char*>(pk.raw()) + 5 * row,
                     static_cast<char*>(pv.raw()) + 5 * row, DType::F8E4M3, &got_scales);
      Tensor hk = gpu().download(pk), hv = gpu().download(pv);
      const auto* bk = static_cast<const uint8_t*>(hk.raw());
      const auto* bv = static_cast<const uint8_t*>(hv.raw());
      EXPECT_EQ(std::memcmp(bk + 5 * row, want_k.data(), n * row), 0);
      EXPECT_EQ(std::memcmp(bv + 5 * row, want_v.data(), n * row), 0);
      EXPECT_TRUE(std::isnan(hk.f32()[5 * row / 4 - 1]) && std::isnan(hk.f32()[(n + 5) * row / 4]))
          << "store_kv wrote outside its rows";
    }
  }
}

std::vector<SegSpec> ragged_cache() {
  std::vector<SegSpec> specs;
  for (int i = 0; i < 4; ++i) specs.push_back({'p', 972});
  for (int i = 0; i < 70; ++i) {
    specs.push_back({'d', 1 + (i * 37) % 61});
    if (i % 18 == 17) specs.push_back({'p', 972});
  }
  specs.push_back({'s', 6 * 45, 6});
  specs.push_back({'d', 978});
  return specs;
}

TEST(GpuOps, AttentionBF16RaggedSegments) {
  REQUIRE_GPU();
  Rng rng;
  TRACE_SEED(rng);
  KvSet kv = make_kv(rng, 16, 64, DType::BF16, ragged_cache(), 1.f);
  EXPECT_GE(kv.dev_segs.size(), 78u);
  check_attention(rng, kv, 26, DType::BF16, kTolAttnBF16, {}, 3.f);
  check_attention(rng, kv, 978, DType::F32, kTolAttnBF16, spread_rows(978, 12, 12), 3.f);
  // Few heads: the automatic split count goes up to fill the GPU, so the merge runs.
  check_attention(rng, make_kv(rng, 2, 64, DType::BF16, ragged_cache(), 1.f), 131, DType::BF16,
                  kTolAttnBF16, {}, 4.f);
}

TEST(GpuOps, AttentionBF16ForcedSplits) {
  REQUIRE_GPU();
  Rng rng;
  TRACE_SEED(rng);
  // Split counts that leave a short last range, through every kernel and the merge; 130 queries
  // leave a query tile of 2 rows.
  KvSet kv = make_kv(rng, 16, 64, DType::BF16, ragged_cache(), 1.f);
  for (const char* splits : {"2", "3", "7"}) {
    SCOPED_TRACE(std::string("splits ") + splits);
    switches().attn_splits = std::atoi(splits);
    check_attention(rng, kv, 130, DType::BF16, kTolAttnBF16, {}, 6.f);
  }
  switches().attn_splits = 0;
}

TEST(GpuOps, AttentionBF16GenericHeadDim128) {
  REQUIRE_GPU();
  Rng rng;
  TRACE_SEED(rng);
  // The camera head's geometry (head_dim 128) runs the generic kernel in bf16.
  check_attention(rng,
                  make_kv(rng, 4, 128, DType::BF16, {{'d', 300}, {'s', 120, 6}, {'d', 1}}, 1.f), 17,
                  DType::BF16, kTolAttnBF16, {}, 2.f);
}

TEST(GpuOps, AttentionCameraHeadShape) {
  REQUIRE_GPU();
  Rng rng;
  TRACE_SEED(rng);
  // The camera head: one query per head against a long per-frame stream (one row per frame) and
  // the current frame; the generic kernel splits such calls down to one key tile per CTA.
  check_attention(rng, make_kv(rng, 16, 128, DType::F32, {{'s', 2000, 1}, {'d', 1}}, 1.f), 1,
                  DType::F32, kTolF32, {}, 2.f);
  check_attention(rng, make_kv(rng, 16, 128, DType::F32, {{'s', 37, 1}, {'d', 1}}, 1.f), 2,
                  DType::F32, kTolF32, {}, 2.f);
  // Rows of a whole number of 16-byte chunks take the vector loads (5 and 3 chunks per row),
  // others (72 and 36 bytes) the scalar ones.
  check_attention(rng, make_kv(rng, 2, 20, DType::F32, {{'d', 90}, {'s', 70, 1}}, 1.f), 3,
                  DType::F32, kTolF32);
  check_attention(rng, make_kv(rng, 3, 24, DType::BF16, {{'d', 90}, {'s', 70, 1}}, 1.f), 3,
                  DType::F32, kTolAttnBF16);
  check_attention(rng, make_kv(rng, 2, 18, DType::F32, {{'d', 90}, {'s', 70, 1}}, 1.f), 3,
                  DType::F32, kTolF32);
  check_attention(rng, make_kv(rng, 3, 18, DType::BF16, {{'d', 90}, {'s', 70, 1}}, 1.f), 3,
                  DType::F32, kTolAttnBF16);
}

// Up to 8 queries with head_dim 64 (f32), 128 or 256 take the row kernel (whole K/V rows per
// warp, per-warp softmax states combined per CTA, splits merged): the camera head's calls at
// 2,000 cached frames, ragged and one-row segments, a single key, fewer keys than a CTA's step,
// forced split counts, peaky scores whose maximum comes last or first.
TEST(GpuOps, AttentionFewQueriesRowKernel) {
  REQUIRE_GPU();
  Rng rng;
  TRACE_SEED(rng);
  check_attention(rng, make_kv(rng, 16, 128, DType::F32, {{'s', 1999, 1}, {'d', 1}}, 1.f), 1,
                  DType::F32, kTolF32, {}, 2.f);
  check_attention(rng, make_kv(rng, 16, 128, DType::F32, {{'s', 300, 1}, {'d', 8}}, 1.f), 8,
                  DType::F32, kTolF32, {}, 2.f);
  check_attention(rng, make_kv(rng, 16, 128, DType::BF16, {{'s', 700, 1}, {'d', 1}}, 1.f), 1,
                  DType::BF16, kTolAttnBF16, {}, 2.f);
  // The camera head's first step in bf16: eight frames, each attending to all eight.
  check_attention(rng, make_kv(rng, 16, 128, DType::BF16, {{'d', 8}}, 1.f), 8, DType::BF16,
                  kTolAttnBF16, {}, 2.f);
  check_attention(rng, make_kv(rng, 5, 128, DType::F32, {{'d', 1}}, 1.f), 1, DType::F32, kTolF32);
  check_attention(rng, make_kv(rng, 3, 64, DType::F32, {{'d', 13}, {'s', 40, 3}, {'d', 2}}, 1.f), 3,
                  DType::F32, kTolF32, {}, 2.f);
  check_attention(rng, make_kv(rng, 2, 256, DType::F32, {{'s', 90, 1}, {'d', 31}}, 1.f), 2,
                  DType::F32, kTolF32, {}, 2.f);
  check_attention(rng, make_kv(rng, 2, 256, DType::BF16, {{'d', 200}, {'s', 33, 1}}, 1.f), 5,
                  DType::F32, kTolAttnBF16, {}, 2.f);
  // Peaky scores: one segment's keys eight times larger, last or first.
  check_attention(rng, make_kv(rng, 4, 128, DType::F32, {{'s', 500, 1}, {'d', 3, 0, 8.f}}, 1.f), 2,
                  DType::F32, kTolF32, {}, 3.f);
  check_attention(rng, make_kv(rng, 4, 128, DType::F32, {{'d', 3, 0, 8.f}, {'s', 500, 1}}, 1.f), 2,
                  DType::F32, kTolF32, {}, 3.f);
  for (const char* splits : {"1", "7", "64"}) {
    switches().attn_splits = std::atoi(splits);
    check_attention(rng, make_kv(rng, 16, 128, DType::F32, {{'s', 1000, 1}, {'d', 1}}, 1.f), 1,
                    DType::F32, kTolF32, {}, 2.f);
    switches().attn_splits = 0;
  }
}

// A step recorded as a CUDA graph gives exactly what the same ops give run directly: staged
// host tables, an input copied from pinned memory, an allocation made while recording, and a
// second recording of the same ops on new data (the executable graph updated in place).
TEST(GpuOps, RecordedStepsMatchDirectExecution) {
  REQUIRE_GPU();
  Rng rng;
  TRACE_SEED(rng);
  Backend& g = gpu();
  const int64_t n = 37, h = 4, d = 64, c = h * d;
  KvSet kv = make_kv(rng, h, d, DType::BF16, {{'d', 130}, {'s', 66, 6}}, 1.f);
  Tensor w = g.upload(rng.tensor({c, c}), DType::F32);
  Tensor bias = g.upload(rng.tensor({c}), DType::F32);
  Tensor pinned = g.alloc_host({n, c});
  const size_t out_floats = static_cast<size_t>(n * c + n * h * d);
  // One step: y = gelu(x w^T + b) + r, o = attention(y as q over kv).
  auto step = [&](const Tensor& x, const Tensor& r, int mode) {  // 0 direct, 1 step, 2 recorded
    std::memcpy(pinned.f32(), x.f32(), x.nbytes());
    Tensor out = g.alloc_host({static_cast<int64_t>(out_floats)});
    std::fill_n(out.f32(), out_floats, NAN);
    if (mode > 0) g.begin_step(mode == 2);
    Tensor xd = g.alloc({n, c}, DType::F32);  // allocated inside the step
    g.upload_into(pinned, xd);
    Tensor y = g.alloc({n, c}, DType::F32);
    g.linear(xd, w, &bias, y, Act::GELU);
    g.add(y, g.upload_transient(r));
    Tensor q = g.alloc({n, h, d}, DType::BF16);
    g.copy(y, q);
    Tensor o = g.alloc({n, h, d}, DType::F32);
    g.attention(q, kv.dev_segs, 0.125f, o);
    g.download_async(y, out.f32());
    g.download_async(o, out.f32() + n * c);
    if (mode > 0) g.end_step();
    g.wait_fence(g.fence());
    return out;
  };
  for (int round = 0; round < 3; ++round) {
    Tensor x = rng.tensor({n, c}), r = rng.tensor({n, c});
    Tensor direct = step(x, r, 0), staged = step(x, r, 1), recorded = step(x, r, 2);
    for (size_t i = 0; i < out_floats; ++i) {
      ASSERT_TRUE(std::isfinite(direct.f32()[i])) << i;
      ASSERT_EQ(direct.f32()[i], staged.f32()[i]) << "round " << round << " element " << i;
      ASSERT_EQ(direct.f32()[i], recorded.f32()[i]) << "round " << round << " element " << i;
    }
  }
  // Waiting for the device inside a recording is refused with an error, and the step can be
  // dropped and the backend used again.
  Tensor t = g.alloc({8}, DType::F32);
  g.begin_step(true);
  g.fill(t, 2.f);
  EXPECT_THROW(g.synchronize(), Error);
  EXPECT_THROW(g.download(t), Error);
  g.abort_step();
  g.fill(t, 3.f);
  EXPECT_EQ(g.download(t).f32()[7], 3.f);
}

// On Hopper consecutive kernels are launched early (programmatic dependent launch) and each waits
// for its predecessor's writes before it reads. A chain in which every kernel reads what the one
// before it has just written, large kernels followed by small ones that read the large ones' last
// blocks (those written last), must give exact results: Fibonacci numbers and their running sum
// in F32, exact below 2^24. Run directly and as a recorded step.
TEST(GpuOps, DependentKernelsReadTheirInputsComplete) {
  REQUIRE_GPU();
  Backend& g = gpu();
  const int64_t rows = 16384, cols = 1024;  // 64 MB each: a kernel of many waves
  const int rounds = 15;  // b ends at F(32); the sum of F(3)..F(32) is F(34) - 2 < 2^24
  for (int mode = 0; mode < 2; ++mode) {
    SCOPED_TRACE(mode ? "recorded step" : "direct");
    Tensor a = g.alloc({rows, cols}, DType::F32), b = g.alloc({rows, cols}, DType::F32);
    Tensor tail = g.alloc({1, cols}, DType::F32);
    g.fill(a, 1.f);
    g.fill(b, 1.f);
    g.fill(tail, 0.f);
    if (mode) g.begin_step(true);
    for (int r = 0; r < rounds; ++r) {
      g.add(a, b);  // a = F(2r + 3)
      g.add(tail, a.slice(rows - 1, rows));
      g.add(b, a);  // b = F(2r + 4)
      g.add(tail, b.slice(rows - 1, rows));
    }
    if (mode) g.end_step();
    const Tensor ha = g.download(a), hb = g.download(b), ht = g.download(tail);
    double fa = 1, fb = 1, sum = 0;
    for (int r = 0; r < rounds; ++r) {
      fa += fb;
      sum += fa;
      fb += fa;
      sum += fb;
    }
    ASSERT_LT(sum, 16777216.0);
    int64_t bad = 0;
    for (int64_t i = 0; i < rows * cols; ++i) bad += (ha.f32()[i] != fa) + (hb.f32()[i] != fb);
    EXPECT_EQ(bad, 0) << "a should be " << fa << ", b " << fb;
    for (int64_t i = 0; i < cols; ++i) ASSERT_EQ(ht.f32()[i], sum) << i;
  }
}

// One plan of several lists (different storage, different segment layouts), each run by
// attention_planned: the same result as attention() over that list, outside a step, in a step
// and in a recorded step, and the CPU's default plan agrees within the bf16 tolerance.
TEST(GpuOps, AttentionPlanServesEveryLayer) {
  REQUIRE_GPU();
  Rng rng;
  TRACE_SEED(rng);
  Backend& g = gpu();
  const int h = 3, d = 64;
  const int64_t nq = 41;
  std::vector<KvSet> layers;
  layers.push_back(
      make_kv(rng, h, d, DType::BF16, {{'p', 97}, {'p', 97}, {'s', 42, 6}, {'d', 41}}, 1.f));
  layers.push_back(make_kv(rng, h, d, DType::BF16, {{'d', 1}, {'s', 6, 6}, {'d', 300}}, 2.f));
  layers.push_back(make_kv(rng, h, d, DType::BF16, {{'p', 200}, {'d', 41}}, 1.f));
  std::vector<std::vector<KVSegment>> dev_plan, host_plan;
  for (const auto& l : layers) {
    dev_plan.push_back(l.dev_segs);
    host_plan.push_back(l.host_segs);
  }
  const float scale = 0.125f;
  std::vector<Tensor> qs;
  for (size_t l = 0; l < layers.size(); ++l)
    qs.push_back(round_bf16(rng.tensor({nq, h, d}, -3.f, 3.f)));
  std::vector<Tensor> want;
  for (size_t l = 0; l < layers.size(); ++l) {
    Tensor o = poisoned({nq, h, d}, DType::F32);
    g.attention(g.upload(qs[l], DType::BF16), dev_plan[l], scale, o);
    want.push_back(g.download(o));
  }
  cpu().plan_attention(host_plan);
  for (int mode = 0; mode < 3; ++mode) {  // 0 outside a step, 1 in a step, 2 recorded
    SCOPED_TRACE("mode " + std::to_string(mode));
    std::vector<Tensor> gq, out;
    for (size_t l = 0; l < layers.size(); ++l) gq.push_back(g.upload(qs[l], DType::BF16));
    for (size_t l = 0; l < layers.size(); ++l) out.push_back(poisoned({nq, h, d}, DType::F32));
    g.synchronize();
    if (mode > 0) g.begin_step(mode == 2);
    g.plan_attention(dev_plan);
    // Layers out of order, as nothing requires them in order.
    for (int l : {2, 0, 1}) g.attention_planned(gq[l], l, scale, out[l]);
    if (mode > 0) g.end_step();
    for (size_t l = 0; l < layers.size(); ++l) {
      Tensor got = g.download(out[l]);
      for (int64_t i = 0; i < got.numel(); ++i)
        ASSERT_EQ(got.f32()[i], want[l].f32()[i]) << "layer " << l << " element " << i;
      Tensor ref = Tensor::zeros({nq, h, d});
      cpu().attention_planned(qs[l], static_cast<int>(l), scale, ref);
      EXPECT_LT(test::compare(got, ref).relative(), kTolAttnBF16) << "layer " << l;
    }
  }
  Tensor o = g.alloc({nq, h, d}, DType::F32);
  EXPECT_THROW(g.attention_planned(g.upload(qs[0], DType::BF16), 3, scale, o), Error);
  EXPECT_THROW(cpu().attention_planned(qs[0], -1, scale, o), Error);
}

TEST(GpuOps, AttentionF32LongPagedCache) {
  REQUIRE_GPU();
  Rng rng;
  TRACE_SEED(rng);
  // Float32 mode over the full streaming key set (generic kernel, split across the keys).
  KvSet kv = make_kv(rng, 16, 64, DType::F32, streaming_cache(8, 64, 120), 1.f);
  // Both sides sum ~71k fp32 products in different orders; the rounding of such a sum grows
  // like sqrt(n) * eps (~1.6e-5 measured on the H200), so this case gets 4x the op tolerance.
  check_attention(rng, kv, 978, DType::F32, 4 * kTolF32, spread_rows(978, 8, 8), 3.f);
}

// ------------------------------------------------------------------------------------------------

TEST(GpuOps, PatchifyMatchesCpu) {
  REQUIRE_GPU();
  Rng rng;
  TRACE_SEED(rng);
  Tensor img = rng.tensor({2, 3, 28, 42});
  Tensor want = Tensor::zeros({2 * 2 * 3, 3 * 14 * 14});
  cpu().patchify(img, 14, want);
  for (DType dt : {DType::F32, DType::BF16}) {
    Tensor rows = poisoned(want.shape(), dt);
    gpu().patchify(gpu().upload(img, DType::F32), 14, rows);
    EXPECT_EQ(rel_err(rows, round_to(want, dt)), 0.0) << dtype_name(dt);
  }
}

TEST(GpuOps, Conv2dMatchesCpu) {
  REQUIRE_GPU();
  Rng rng;
  TRACE_SEED(rng);
  struct Case {
    Shape x;
    int64_t co, k;
    int stride, pad;
    bool bias;
  };
  const Case cases[] = {{{2, 5, 13, 17}, 7, 3, 1, 1, true},
                        {{1, 8, 15, 16}, 4, 3, 2, 1, true},
                        {{2, 16, 9, 11}, 12, 1, 1, 0, false},
                        {{1, 3, 28, 28}, 6, 14, 14, 0, true},
                        {{1, 64, 20, 24}, 32, 3, 1, 1, true}};
  for (const auto& c : cases) {
    const int64_t ho = (c.x[2] + 2 * c.pad - c.k) / c.stride + 1;
    const int64_t wo = (c.x[3] + 2 * c.pad - c.k) / c.stride + 1;
    SCOPED_TRACE(shape_str(c.x) + " k=" + std::to_string(c.k) + " s=" + std::to_string(c.stride));
    Tensor x = rng.tensor(c.x), w = rng.tensor({c.co, c.x[1], c.k, c.k}, -.3f, .3f);
    Tensor b = rng.tensor({c.co});
    Tensor want = Tensor::zeros({c.x[0], c.co, ho, wo});
    cpu().conv2d(x, w, c.bias ? &b : nullptr, c.stride, c.pad, want);
    Tensor gb = gpu().upload(b, DType::F32);
    Tensor y = poisoned(want.shape(), DType::F32);
    gpu().conv2d(gpu().upload(x, DType::F32), gpu().upload(w, DType::F32), c.bias ? &gb : nullptr,
                 c.stride, c.pad, y);
    EXPECT_LT(rel_err(y, want), kTolF32);
  }
}

// The fast path (bf16 implicit GEMM, 3x3 kernels with input channels a multiple of 32): on inputs
// already rounded to bf16 it must agree with the fp32 CPU convolution to accumulation order.
// One conv2d on the GPU against the CPU: a k x k kernel (padding k / 2), with or without bias,
// and the epilogue (ReLU, or accumulate into random values both sides start from; otherwise the
// output is poisoned). `bf16` rounds the inputs as the fast path reads them.
void check_conv(Rng& rng, const Shape& xs, int64_t co, int k, int stride, bool bias, Act act,
                bool accumulate, bool bf16) {
  const int pad = k / 2;
  const int64_t ho = (xs[2] + 2 * pad - k) / stride + 1, wo = (xs[3] + 2 * pad - k) / stride + 1;
  const auto rounded = [&](Tensor t) { return bf16 ? round_to(t, DType::BF16) : t; };
  Tensor x = rounded(rng.tensor(xs));
  Tensor w = rounded(rng.tensor({co, xs[1], k, k}, -.3f, .3f));
  Tensor b = rng.tensor({co}), y0 = rng.tensor({xs[0], co, ho, wo});
  Tensor want = Tensor::zeros(y0.shape());
  if (accumulate) std::copy(y0.f32(), y0.f32() + y0.numel(), want.f32());
  cpu().conv2d(x, w, bias ? &b : nullptr, stride, pad, want, act, accumulate);
  Tensor gb = gpu().upload(b, DType::F32);
  Tensor y = accumulate ? gpu().upload(y0, DType::F32) : poisoned(want.shape(), DType::F32);
  gpu().conv2d(gpu().upload(x, DType::F32), gpu().upload(w, DType::F32), bias ? &gb : nullptr,
               stride, pad, y, act, accumulate);
  EXPECT_LT(rel_err(y, want), kTolF32);
}

TEST(GpuOps, Conv2dFastMatchesCpu) {
  REQUIRE_GPU();
  Rng rng;
  TRACE_SEED(rng);
  struct Case {
    Shape x;
    int64_t co;
    int stride;
    bool bias;
    int k = 3;  // 3x3 with padding 1, or 1x1 (the depth head's projections and out_convs)
  };
  const Case cases[] = {{{1, 32, 13, 17}, 7, 1, true},        {{2, 64, 20, 24}, 32, 1, false},
                        {{1, 128, 27, 36}, 256, 2, true},     {{1, 256, 15, 22}, 128, 1, true},
                        {{1, 128, 54, 72}, 32, 1, true},      {{2, 32, 5, 3}, 70, 1, true},
                        {{1, 64, 23, 29}, 200, 1, true},      {{1, 32, 130, 150}, 256, 1, true},
                        {{1, 1024, 27, 36}, 256, 1, true, 1}, {{2, 64, 9, 11}, 70, 1, false, 1},
                        {{1, 32, 41, 53}, 2, 1, true, 1},     {{1, 192, 17, 19}, 384, 1, true},
                        {{3, 64, 7, 5}, 130, 2, false},       {{2, 64, 19, 23}, 17, 1, true},
                        {{1, 128, 9, 13}, 1, 1, true, 1}};
  gpu().allow_fast_convolutions(true);
  // Both kernels (on Hopper the wgmma one takes input channels in multiples of 64 and more than
  // 64 or at most 32 outputs; elsewhere, and for the other layers, the mma.sync one) and every
  // tile width on every case (the automatic choice takes the widest only for large layers).
  for (const char* wgmma : {"1", "0"})
    for (const char* bn : {"auto", "32", "64", "128", "256"})
      for (const auto& c : cases) {
        switches().conv_wgmma = std::strcmp(wgmma, "0") != 0;
        switches().conv_bn = std::strcmp(bn, "auto") == 0 ? 0 : std::atoi(bn);
        SCOPED_TRACE(shape_str(c.x) + " -> " + std::to_string(c.co) + " k=" + std::to_string(c.k) +
                     " s=" + std::to_string(c.stride) + " BN " + bn + " wgmma " + wgmma);
        check_conv(rng, c.x, c.co, c.k, c.stride, c.bias, Act::None, false, true);
      }
  switches().conv_bn = 0;
  switches().conv_wgmma = true;
  gpu().allow_fast_convolutions(false);
}

// upsample_conv2d on the fast path writes the upsampled image straight into the convolution's
// channels-last bf16 input: the same bytes as upsample_bilinear then conv2d on the GPU, and the
// CPU's F32 result within the tolerance of one bf16 rounding of the input (the CPU's resize
// rounds differently in the last bit, so rounding its result as well would not give the GPU's
// input). Shapes as the depth head's output stage (twice the size, and an odd factor with rows
// that are not multiples of four or of 32), with and without the addend (planes repeated over
// the images), on both kernels; without the fast path (float32) it is the two ops in F32.
TEST(GpuOps, UpsampleConv2dIsUpsampleThenConv2d) {
  REQUIRE_GPU();
  Rng rng;
  TRACE_SEED(rng);
  struct Case {
    Shape x;
    int64_t ho, wo, co;
    bool add;
    Act act;
  };
  const Case cases[] = {{{1, 64, 9, 12}, 18, 24, 128, false, Act::None},
                        {{2, 32, 10, 14}, 23, 31, 32, true, Act::ReLU},
                        {{1, 128, 12, 16}, 27, 37, 32, true, Act::ReLU},
                        {{3, 32, 6, 8}, 11, 16, 64, true, Act::None},
                        {{1, 64, 7, 5}, 7, 5, 70, true, Act::None}};
  for (const char* mode : {"wgmma", "mma", "f32"}) {
    const bool fast = std::strcmp(mode, "f32") != 0;
    gpu().allow_fast_convolutions(fast);
    switches().conv_wgmma = std::strcmp(mode, "mma") != 0;
    for (const auto& c : cases) {
      SCOPED_TRACE(shape_str(c.x) + " -> " + std::to_string(c.ho) + "x" + std::to_string(c.wo) +
                   ", " + std::to_string(c.co) + " outputs, " + mode);
      const int64_t n = c.x[0], ci = c.x[1];
      Tensor x = rng.tensor(c.x), add = rng.tensor({1, ci, c.ho, c.wo}), b = rng.tensor({c.co});
      Tensor w = round_to(rng.tensor({c.co, ci, 3, 3}, -.3f, .3f), DType::BF16);
      Tensor up = Tensor::zeros({n, ci, c.ho, c.wo});
      cpu().upsample_bilinear(x, up, c.add ? &add : nullptr);
      Tensor want = Tensor::zeros({n, c.co, c.ho, c.wo});
      cpu().conv2d(up, w, &b, 1, 1, want, c.act);
      Tensor gx = gpu().upload(x, DType::F32), gw = gpu().upload(w, DType::F32);
      Tensor gb = gpu().upload(b, DType::F32), gadd = gpu().upload(add, DType::F32);
      const Tensor* gaddp = c.add ? &gadd : nullptr;
      Tensor fused = poisoned(want.shape(), DType::F32);
      gpu().upsample_conv2d(gx, gaddp, c.ho, c.wo, gw, &gb, 1, 1, fused, c.act);
      Tensor gup = poisoned(up.shape(), DType::F32), two = poisoned(want.shape(), DType::F32);
      gpu().upsample_bilinear(gx, gup, gaddp);
      gpu().conv2d(gup, gw, &gb, 1, 1, two, c.act);
      const Tensor hf = gpu().download(fused), h2 = gpu().download(two);
      EXPECT_EQ(std::memcmp(hf.raw(), h2.raw(), hf.nbytes()), 0) << "differs from the two ops";
      EXPECT_LT(rel_err(fused, want), fast ? kTolBF16 : kTolF32);
    }
  }
  switches().conv_wgmma = true;
  gpu().allow_fast_convolutions(false);
}

// The fast path's epilogues (ReLU, accumulate into the output) and its K splits, forced and
// automatic (small layers split on their own), against the CPU on the same bf16-rounded inputs.
TEST(GpuOps, Conv2dEpiloguesAndSplitsMatchCpu) {
  REQUIRE_GPU();
  Rng rng;
  TRACE_SEED(rng);
  struct Case {
    Shape x;
    int64_t co;
    int stride;
  };
  const Case cases[] = {{{1, 64, 23, 29}, 200, 1}, {{1, 96, 14, 18}, 256, 2},
                        {{2, 32, 5, 3}, 70, 1},    {{1, 256, 7, 9}, 64, 1},
                        {{1, 128, 9, 7}, 256, 1},  {{2, 64, 6, 5}, 130, 2},
                        {{2, 128, 11, 13}, 24, 1}};
  gpu().allow_fast_convolutions(true);
  for (const char* wgmma : {"1", "0"})
    for (const char* splits : {"auto", "1", "3", "7"})
      for (const auto& c : cases)
        for (int mode = 0; mode < 3; ++mode) {  // plain, ReLU, accumulate
          switches().conv_wgmma = std::strcmp(wgmma, "0") != 0;
          switches().conv_splits = std::strcmp(splits, "auto") == 0 ? 0 : std::atoi(splits);
          SCOPED_TRACE(shape_str(c.x) + " -> " + std::to_string(c.co) +
                       " s=" + std::to_string(c.stride) + " splits " + splits + " mode " +
                       std::to_string(mode) + " wgmma " + wgmma);
          check_conv(rng, c.x, c.co, 3, c.stride, true, mode == 1 ? Act::ReLU : Act::None,
                     mode == 2, true);
        }
  switches().conv_splits = 0;
  switches().conv_wgmma = true;
  gpu().allow_fast_convolutions(false);
}

// The fallback (im2col + GEMM) path's epilogues.
TEST(GpuOps, Conv2dGemmEpiloguesMatchCpu) {
  REQUIRE_GPU();
  Rng rng;
  TRACE_SEED(rng);
  for (int k : {1, 3})
    for (int mode = 1; mode < 3; ++mode) {
      SCOPED_TRACE("k=" + std::to_string(k) + " mode " + std::to_string(mode));
      check_conv(rng, {2, 5, 13, 17}, 7, k, 1, true, mode == 1 ? Act::ReLU : Act::None, mode == 2,
                 false);
    }
}

// Two chains side by side (Backend::begin_side): a few-row linear with an F32 input into bf16
// weights (converted in the side queue's own scratch) and an attention on the side queue, a
// large linear (cuBLASLt and its workspace) and a fast convolution (split K) on the main queue,
// inside a recorded step and outside one, several times over: each result is what the CPU gives.
TEST(GpuOps, SideQueueChainsMatchTheCpu) {
  REQUIRE_GPU();
  Rng rng;
  TRACE_SEED(rng);
  gpu().allow_fast_convolutions(true);
  for (bool record : {false, true})
    for (int rep = 0; rep < 3; ++rep) {
      SCOPED_TRACE(std::string(record ? "recorded" : "not recorded") + " rep " +
                   std::to_string(rep));
      Tensor x1 = round_bf16(rng.tensor({7, 512})),
             w1 = round_bf16(rng.tensor({1024, 512}, -.2f, .2f));
      Tensor q = round_bf16(rng.tensor({3, 4, 64})), k = round_bf16(rng.tensor({300, 4, 64}));
      Tensor v = round_bf16(rng.tensor({300, 4, 64}));
      Tensor x2 = round_bf16(rng.tensor({700, 256})),
             w2 = round_bf16(rng.tensor({512, 256}, -.2f, .2f));
      Tensor cx = round_to(rng.tensor({1, 64, 9, 11}), DType::BF16);
      Tensor cw = round_to(rng.tensor({96, 64, 3, 3}, -.3f, .3f), DType::BF16);
      Tensor want1 = Tensor::zeros({7, 1024}), want2 = Tensor::zeros({700, 512});
      Tensor want_att = Tensor::zeros({3, 4, 64}), want_conv = Tensor::zeros({1, 96, 9, 11});
      cpu().linear(x1, w1, nullptr, want1);
      cpu().linear(x2, w2, nullptr, want2);
      cpu().attention(q, {KVSegment{k.raw(), v.raw(), 300}}, 0.125f, want_att);
      cpu().conv2d(cx, cw, nullptr, 1, 1, want_conv);

      Tensor g1 = gpu().upload(x1, DType::F32), gw1 = gpu().upload(w1, DType::BF16);
      Tensor gq = gpu().upload(q, DType::F32), gk = gpu().upload(k, DType::F32);
      Tensor gv = gpu().upload(v, DType::F32);
      Tensor g2 = gpu().upload(x2, DType::BF16), gw2 = gpu().upload(w2, DType::BF16);
      Tensor gcx = gpu().upload(cx, DType::F32), gcw = gpu().upload(cw, DType::F32);
      Tensor y1 = poisoned({7, 1024}, DType::F32), y2 = poisoned({700, 512}, DType::F32);
      Tensor att = poisoned({3, 4, 64}, DType::F32), conv = poisoned({1, 96, 9, 11}, DType::F32);
      gpu().begin_step(record);
      gpu().begin_side();
      gpu().linear(g1, gw1, nullptr, y1);
      gpu().attention(gq, {KVSegment{gk.raw(), gv.raw(), 300}}, 0.125f, att);
      gpu().end_side();
      gpu().linear(g2, gw2, nullptr, y2);
      gpu().conv2d(gcx, gcw, nullptr, 1, 1, conv);
      gpu().join_side();
      gpu().end_step();
      EXPECT_LT(rel_err(y1, want1), kTolF32);
      EXPECT_LT(rel_err(y2, want2), kTolF32);
      EXPECT_LT(rel_err(att, want_att), 1e-5);
      EXPECT_LT(rel_err(conv, want_conv), kTolF32);
    }
  gpu().allow_fast_convolutions(false);
}

// Misuse of the side queue is one error line; an aborted step leaves the main queue usable.
TEST(GpuOps, SideQueueMisuseIsRefused) {
  REQUIRE_GPU();
  EXPECT_THROW(gpu().end_side(), Error);
  gpu().begin_side();
  EXPECT_THROW(gpu().begin_side(), Error);
  EXPECT_THROW(gpu().fence(), Error);
  gpu().end_side();
  gpu().begin_step(true);
  gpu().begin_side();
  EXPECT_THROW(gpu().end_step(), Error);
  gpu().abort_step();
  Tensor x = gpu().upload(Tensor::zeros({4, 8}), DType::F32), y = poisoned({4, 8}, DType::F32);
  gpu().copy(x, y);
  gpu().synchronize();
  EXPECT_EQ(rel_err(y, Tensor::zeros({4, 8})), 0.0);
}

TEST(GpuOps, DownloadIntoCopiesEveryDtype) {
  REQUIRE_GPU();
  Rng rng;
  TRACE_SEED(rng);
  Tensor x = round_to(rng.tensor({5, 77}), DType::BF16);
  for (DType dt : {DType::F32, DType::BF16}) {
    std::vector<float> host(x.numel() + 1, NAN);
    host.back() = 7.f;
    gpu().download_into(gpu().upload(x, dt), host.data());
    for (int64_t i = 0; i < x.numel(); ++i) ASSERT_EQ(host[i], x.f32()[i]) << dtype_name(dt);
    EXPECT_EQ(host.back(), 7.f);  // nothing past the end
  }
}

TEST(GpuOps, ConvTranspose2dMatchesCpu) {
  REQUIRE_GPU();
  Rng rng;
  TRACE_SEED(rng);
  for (int k : {2, 4}) {
    SCOPED_TRACE("k=" + std::to_string(k));
    Tensor x = rng.tensor({2, 6, 5, 7}), w = rng.tensor({6, 4, k, k}), b = rng.tensor({4});
    Tensor want = Tensor::zeros({2, 4, 5 * k, 7 * k});
    cpu().conv_transpose2d(x, w, &b, k, want);
    Tensor gb = gpu().upload(b, DType::F32);
    Tensor y = poisoned(want.shape(), DType::F32);
    gpu().conv_transpose2d(gpu().upload(x, DType::F32), gpu().upload(w, DType::F32), &gb, k, y);
    EXPECT_LT(rel_err(y, want), kTolF32);
  }
}

TEST(GpuOps, UpsampleBilinearMatchesCpu) {
  REQUIRE_GPU();
  Rng rng;
  TRACE_SEED(rng);
  struct Case {
    Shape in, out;
  };
  // Rows of whole quads (36, 20, 288) take the kernel's 16-byte path, the others its scalar one;
  // with an addend of one image, repeated over the batch as the depth head's position embedding.
  for (const Case& c :
       {Case{{2, 3, 7, 9}, {2, 3, 28, 36}}, Case{{1, 2, 13, 17}, {1, 2, 29, 31}},
        Case{{1, 1, 5, 6}, {1, 1, 1, 4}}, Case{{1, 4, 30, 40}, {1, 4, 15, 20}},
        Case{{3, 5, 108, 144}, {3, 5, 216, 288}}, Case{{2, 2, 9, 7}, {2, 2, 19, 517}},
        // more planes than one launch takes (65,535): the addend's index goes on across launches
        Case{{2, 32800, 1, 2}, {2, 32800, 2, 4}}, Case{{2, 32800, 1, 2}, {2, 32800, 2, 3}}})
    for (bool with_add : {false, true}) {
      SCOPED_TRACE(shape_str(c.in) + " -> " + shape_str(c.out) + (with_add ? " + addend" : ""));
      Tensor x = rng.tensor(c.in), add = rng.tensor({1, c.out[1], c.out[2], c.out[3]});
      Tensor want = Tensor::zeros(c.out);
      cpu().upsample_bilinear(x, want, with_add ? &add : nullptr);
      Tensor gadd = gpu().upload(add, DType::F32);
      Tensor y = poisoned(c.out, DType::F32);
      gpu().upsample_bilinear(gpu().upload(x, DType::F32), y, with_add ? &gadd : nullptr);
      EXPECT_LT(rel_err(y, want), kTolF32);
    }
}

TEST(GpuOps, ReportsBadShapes) {
  REQUIRE_GPU();
  Tensor x = gpu().alloc({4, 8}, DType::F32), w = gpu().alloc({5, 9}, DType::F32);
  Tensor y = gpu().alloc({4, 5}, DType::F32);
  EXPECT_THROW(gpu().linear(x, w, nullptr, y), Error);
  Tensor host = Tensor::zeros({4, 8});
  EXPECT_THROW(gpu().layer_norm(host, nullptr, nullptr, 1e-5f, y), Error);
  Tensor q = gpu().alloc({2, 1, 64}, DType::BF16), o = gpu().alloc({2, 1, 64}, DType::BF16);
  EXPECT_THROW(gpu().attention(q, {}, 0.125f, o), Error);
}

// The same bad calls give the same line as on the CPU (tests/unit/backend_checks_test.cpp).
TEST(GpuOps, BadOperandsGiveTheCpuMessage) {
  REQUIRE_GPU();
  for (const test::BadCall& c : test::bad_calls()) {
    SCOPED_TRACE(c.error);
    try {
      c.call(gpu());
      ADD_FAILURE() << "no error";
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()), c.error);
    }
  }
}

}  // namespace
}  // namespace lingbot
