// GPU micro-benchmarks for the shapes of one streaming frame (spec 05): paged bf16 attention of
// 978 queries x 16 heads over 10k and 72k cached keys, and the transformer block's four GEMMs
// through Backend::linear. Each iteration queues several calls and synchronises once, so launch
// latency overlaps the GPU work as it does in the model; the Time column is per batch and
// us_per_call / TFLOPs are per call. Skipped without a CUDA device.
//
// The attention dispatch's switches (backend/switches.h) are set per benchmark: the kernel
// argument picks the implementation (mma or wgmma; on a GPU without wgmma the wgmma rows run the
// mma kernel), the splits argument the key-split count (0 = automatic). LINGBOT_ATTN_MODE
// (diagnostic wgmma variants that compute wrong results to time a part of the kernel alone, in
// builds with LINGBOT_KERNEL_LAB=ON) is left to the caller's environment.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "backend/ops.h"
#include "backend/switches.h"

namespace lingbot {
namespace {

constexpr int kHeads = 16, kDim = 64, kQueries = 978, kPage = 972;

Backend* gpu(std::string* why) {
  static std::string reason;
  static std::unique_ptr<Backend> b = make_cuda_backend(&reason);
  if (why) *why = reason;
  return b.get();
}

Tensor random_host(const Shape& shape, uint64_t seed, float lo = -1.f, float hi = 1.f) {
  Tensor t = Tensor::zeros(shape);
  uint64_t s = seed * 0x9E3779B97F4A7C15ull + 7;
  float* p = t.f32();
  for (int64_t i = 0; i < t.numel(); ++i) {
    s ^= s >> 12;
    s ^= s << 25;
    s ^= s >> 27;
    p[i] = lo + (hi - lo) * static_cast<float>((s * 0x2545F4914F6CDD1Dull) >> 40) / 16777216.f;
  }
  return t;
}

// A KV pool big enough for the largest benchmark, filled once with random bf16 values.
struct Pool {
  Tensor k, v;
  int64_t rows = 0;
};
Pool& pool(Backend& be, int64_t rows) {
  static Pool p;
  if (p.rows < rows) {
    p.k = be.upload(random_host({rows, kHeads, kDim}, 1), DType::BF16);
    p.v = be.upload(random_host({rows, kHeads, kDim}, 2), DType::BF16);
    p.rows = rows;
  }
  return p;
}

// The streaming layout: full pages of 972 patch rows in scrambled order, a special-token run of
// 6 per frame, and the current frame's 978 rows.
std::vector<KVSegment> streaming_segments(const Pool& p, int64_t keys) {
  const size_t row = static_cast<size_t>(kHeads) * kDim * dtype_size(p.k.dtype());
  auto at = [&](const Tensor& t, int64_t r) { return static_cast<char*>(t.raw()) + r * row; };
  std::vector<KVSegment> segs;
  const int64_t pages = (keys - kQueries) / kPage;
  const int64_t specials = keys - kQueries - pages * kPage;
  for (int64_t i = 0; i < pages; ++i) {
    const int64_t slot = (i * 37) % pages;  // page order unrelated to pool order
    segs.push_back({at(p.k, slot * kPage), at(p.v, slot * kPage), kPage});
  }
  int64_t r = pages * kPage;
  if (specials) segs.push_back({at(p.k, r), at(p.v, r), static_cast<int32_t>(specials)});
  r += specials;
  segs.push_back({at(p.k, r), at(p.v, r), kQueries});
  return segs;
}

// Times batches of attention calls of 978 bf16 queries over `segs` (after three untimed calls)
// and reports the per-call time and rate; a call the backend refuses skips the benchmark.
void time_attention(benchmark::State& state, Backend& be, const std::vector<KVSegment>& segs,
                    int64_t keys) {
  Tensor q = be.upload(random_host({kQueries, kHeads, kDim}, 3, -3.f, 3.f), DType::BF16);
  Tensor out = be.alloc({kQueries, kHeads, kDim}, DType::BF16);
  try {
    for (int i = 0; i < 3; ++i) be.attention(q, segs, 0.125f, out);
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
    return;
  }
  be.synchronize();
  constexpr int kCalls = 10;
  double total = 0;
  for (auto _ : state) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < kCalls; ++i) be.attention(q, segs, 0.125f, out);
    be.synchronize();
    const std::chrono::duration<double> dt = std::chrono::steady_clock::now() - t0;
    state.SetIterationTime(dt.count());
    total += dt.count();
  }
  const double flops = 4.0 * kQueries * static_cast<double>(keys) * kHeads * kDim;
  const double calls = static_cast<double>(state.iterations()) * kCalls;
  state.counters["us_per_call"] = total / calls * 1e6;
  state.counters["TFLOPs"] = flops * 1e-12 * calls / total;
  state.counters["segments"] = static_cast<double>(segs.size());
}

// Args: keys, kernel (0 mma, 2 wgmma; 1, 3 and 4, variants since removed, are not used so that the
// numbers name the same kernels as in earlier measurements), forced splits (0 = automatic).
void BM_PagedAttentionBF16(benchmark::State& state) {
  std::string why;
  Backend* be = gpu(&why);
  if (!be) {
    state.SkipWithError(("no CUDA backend: " + why).c_str());
    return;
  }
  const int64_t keys = state.range(0), kernel = state.range(1);
  const BackendSwitches saved = switches();
  switches().attn_impl = kernel >= 2 ? "wgmma" : "mma";
  switches().attn_splits = static_cast<int>(state.range(2));
  time_attention(state, *be, streaming_segments(pool(*be, 72000), keys), keys);
  switches() = saved;
}
BENCHMARK(BM_PagedAttentionBF16)
    ->ArgNames({"keys", "kernel", "splits"})
    ->Args({10000, 0, 0})
    ->Args({72000, 0, 0})
    ->Args({10000, 2, 0})
    ->Args({72000, 2, 0})
    ->Args({72000, 2, 2})
    ->Args({72000, 2, 3})
    ->Args({72000, 2, 4})
    ->Args({978, 2, 0})  // the frame and DINO blocks' key range (one segment)
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond)
    ->MinTime(0.3);

// The same pool stored as the fp8 KV cache stores it: e4m3 with per-head scales.
struct Pool8 {
  Pool pool;
  Tensor scales;
};
Pool8& pool8(Backend& be, int64_t rows) {
  static Pool8 p;
  if (p.pool.rows < rows) {
    const Pool& src = pool(be, rows);
    p.scales = be.alloc({2, kHeads}, DType::F32);
    be.fp8_kv_scales(src.k, src.v, p.scales);
    p.pool.k = be.alloc({rows, kHeads, kDim}, DType::F8E4M3);
    p.pool.v = be.alloc({rows, kHeads, kDim}, DType::F8E4M3);
    be.store_kv(src.k, src.v, p.pool.k.raw(), p.pool.v.raw(), DType::F8E4M3, &p.scales);
    p.pool.rows = rows;
  }
  return p;
}

// e4m3 K/V on the Hopper kernel (the fp8 KV cache). Args: keys.
void BM_PagedAttentionFP8(benchmark::State& state) {
  std::string why;
  Backend* be = gpu(&why);
  if (!be) {
    state.SkipWithError(("no CUDA backend: " + why).c_str());
    return;
  }
  const int64_t keys = state.range(0);
  Pool8& p = pool8(*be, 72000);
  auto segs = streaming_segments(p.pool, keys);
  for (auto& s : segs) s.scales = p.scales.f32();
  time_attention(state, *be, segs, keys);
}
BENCHMARK(BM_PagedAttentionFP8)
    ->ArgNames({"keys"})
    ->Arg(10000)
    ->Arg(72000)
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond)
    ->MinTime(0.3);

// Args: M, K, N, act (0 none, 1 GELU), output dtype (0 bf16, 1 f32), bias dtype (0 bf16, 1 f32:
// the model keeps biases in f32).
void BM_LinearBF16(benchmark::State& state) {
  std::string why;
  Backend* be = gpu(&why);
  if (!be) {
    state.SkipWithError(("no CUDA backend: " + why).c_str());
    return;
  }
  const int64_t m = state.range(0), k = state.range(1), n = state.range(2);
  const Act act = state.range(3) ? Act::GELU : Act::None;
  const DType ydt = state.range(4) ? DType::F32 : DType::BF16;
  Tensor x = be->upload(random_host({m, k}, 4), DType::BF16);
  Tensor w = be->upload(random_host({n, k}, 5, -.05f, .05f), DType::BF16);
  Tensor b = be->upload(random_host({n}, 6), state.range(5) ? DType::F32 : DType::BF16);
  Tensor y = be->alloc({m, n}, ydt);
  for (int i = 0; i < 3; ++i) be->linear(x, w, &b, y, act);
  be->synchronize();
  constexpr int kCalls = 50;
  double total = 0;
  for (auto _ : state) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < kCalls; ++i) be->linear(x, w, &b, y, act);
    be->synchronize();
    const std::chrono::duration<double> dt = std::chrono::steady_clock::now() - t0;
    state.SetIterationTime(dt.count());
    total += dt.count();
  }
  const double flops = 2.0 * m * k * n;
  const double calls = static_cast<double>(state.iterations()) * kCalls;
  state.counters["us_per_call"] = total / calls * 1e6;
  state.counters["TFLOPs"] = flops * 1e-12 * calls / total;
}
BENCHMARK(BM_LinearBF16)
    ->ArgNames({"M", "K", "N", "gelu", "f32out", "f32bias"})
    ->Args({978, 1024, 3072, 0, 0, 1})   // qkv
    ->Args({978, 1024, 1024, 0, 0, 1})   // proj
    ->Args({978, 1024, 4096, 1, 0, 1})   // fc1 + GELU
    ->Args({978, 4096, 1024, 0, 0, 1})   // fc2
    ->Args({978, 1024, 3072, 0, 0, 0})   // qkv, bf16 bias
    ->Args({978, 1024, 4096, 0, 0, 0})   // fc1 without the GELU pass, bf16 bias
    ->Args({978, 4096, 1024, 0, 1, 1})   // fc2, fp32 output
    ->Args({7824, 1024, 4096, 1, 0, 1})  // fc1 over 8 frames
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond)
    ->MinTime(0.3);

// The camera head's one-token linear layers: F32 token, bf16 weights, F32 bias and output (Args:
// K, N, GELU, residual add). The time is the weight's bytes, so GB/s is the figure of merit.
void BM_CameraHeadLinear(benchmark::State& state) {
  std::string why;
  Backend* be = gpu(&why);
  if (!be) {
    state.SkipWithError(("no CUDA backend: " + why).c_str());
    return;
  }
  const int64_t k = state.range(0), n = state.range(1);
  const Act act = state.range(2) ? Act::GELU : Act::None;
  const bool add = state.range(3) != 0;
  Tensor x = be->upload(random_host({1, k}, 4), DType::F32);
  Tensor w = be->upload(random_host({n, k}, 5, -.05f, .05f), DType::BF16);
  Tensor b = be->upload(random_host({n}, 6), DType::F32);
  Tensor y = be->upload(random_host({1, n}, 7), DType::F32);
  auto call = [&] {
    if (add)
      be->linear_add(x, w, &b, y);
    else
      be->linear(x, w, &b, y, act);
  };
  for (int i = 0; i < 3; ++i) call();
  be->synchronize();
  constexpr int kCalls = 50;
  double total = 0;
  for (auto _ : state) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < kCalls; ++i) call();
    be->synchronize();
    const std::chrono::duration<double> dt = std::chrono::steady_clock::now() - t0;
    state.SetIterationTime(dt.count());
    total += dt.count();
  }
  const double calls = static_cast<double>(state.iterations()) * kCalls;
  state.counters["us_per_call"] = total / calls * 1e6;
  state.counters["GBps"] = 2.0 * n * k * 1e-9 * calls / total;
}
BENCHMARK(BM_CameraHeadLinear)
    ->ArgNames({"K", "N", "gelu", "add"})
    ->Args({2048, 6144, 0, 0})  // qkv (and the modulation)
    ->Args({2048, 2048, 0, 1})  // proj, residual
    ->Args({2048, 8192, 1, 0})  // fc1 + GELU
    ->Args({8192, 2048, 0, 1})  // fc2, residual
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond)
    ->MinTime(0.3);

// The camera head's attention: one f32 query per head (16 x 128) against `frames` cached rows in
// chunks of 64 (its cache's layout) and the current frame's row. Args: frames, kernel (0 the
// default, the row kernel; 1 the generic kernel). GB/s counts the K/V bytes read.
void BM_CameraHeadAttention(benchmark::State& state) {
  std::string why;
  Backend* be = gpu(&why);
  if (!be) {
    state.SkipWithError(("no CUDA backend: " + why).c_str());
    return;
  }
  constexpr int64_t kCamHeads = 16, kCamDim = 128, kChunk = 64;
  const int64_t frames = state.range(0);
  const std::string impl = switches().attn_impl;
  if (state.range(1) == 1) switches().attn_impl = "generic";
  Tensor k = be->upload(random_host({frames + 1, kCamHeads, kCamDim}, 8), DType::F32);
  Tensor v = be->upload(random_host({frames + 1, kCamHeads, kCamDim}, 9), DType::F32);
  const size_t row = static_cast<size_t>(kCamHeads) * kCamDim * 4;
  std::vector<KVSegment> segs;
  for (int64_t r = 0; r <= frames; r += kChunk) {
    const int64_t n = std::min(kChunk, frames - r);
    if (n > 0)
      segs.push_back({static_cast<char*>(k.raw()) + r * row, static_cast<char*>(v.raw()) + r * row,
                      static_cast<int32_t>(n)});
  }
  segs.push_back(
      {static_cast<char*>(k.raw()) + frames * row, static_cast<char*>(v.raw()) + frames * row, 1});
  Tensor q = be->upload(random_host({1, kCamHeads, kCamDim}, 10), DType::F32);
  Tensor out = be->alloc({1, kCamHeads, kCamDim}, DType::F32);
  const float scale = 1.f / std::sqrt(static_cast<float>(kCamDim));
  for (int i = 0; i < 3; ++i) be->attention(q, segs, scale, out);
  be->synchronize();
  constexpr int kCalls = 50;
  double total = 0;
  for (auto _ : state) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < kCalls; ++i) be->attention(q, segs, scale, out);
    be->synchronize();
    const std::chrono::duration<double> dt = std::chrono::steady_clock::now() - t0;
    state.SetIterationTime(dt.count());
    total += dt.count();
  }
  switches().attn_impl = impl;
  const double calls = static_cast<double>(state.iterations()) * kCalls;
  state.counters["us_per_call"] = total / calls * 1e6;
  state.counters["GBps"] = 2.0 * static_cast<double>(frames + 1) * row * 1e-9 * calls / total;
}
BENCHMARK(BM_CameraHeadAttention)
    ->ArgNames({"frames", "kernel"})
    ->Args({200, 0})
    ->Args({200, 1})
    ->Args({2000, 0})
    ->Args({2000, 1})
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond)
    ->MinTime(0.3);

}  // namespace
}  // namespace lingbot
