// The time preflight: FLOPs of a step counted from the architecture, over a rate measured on the
// CPU or stated for a GPU. The count covers the matrix products and attention of the DINO trunk
// and the aggregator (most of the work), and the depth head's convolutions at their scales; the
// small camera head and the element-wise ops are left out. The rates are sustained fractions
// calibrated on our own runs (see the constants), so the result is a planning figure, within
// about a factor of two, not a benchmark.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <mutex>
#include <vector>

#include "backend/cpu/gemm.h"
#include "backend/ops.h"
#include "model/config.h"
#include "stream/preflight.h"

namespace lingbot {
namespace {

// A transformer block over `tokens` queries attending to `keys` keys: the QKV and output
// projections (4 C^2 a token), the MLP (2 r C^2) and attention (QK^T and PV, 2 C a key each).
double block_flops(const ModelConfig& c, double tokens, double keys) {
  const double C = static_cast<double>(c.dim);
  return 2 * tokens * C * C * (4 + 2 * static_cast<double>(c.mlp_ratio)) + 4 * tokens * keys * C;
}

// The DPT head for one frame of P patches: the four projections of the selected layers, their
// 3x3 convolutions to the feature width at 4x, 2x, 1x and 1/2x the patch grid, the fusion
// blocks (two residual units of two 3x3 convolutions each, and a 1x1) and the output head at
// twice the finest scale.
double depth_head_flops(const ModelConfig& c, double patches) {
  const double F = static_cast<double>(c.dpt_features), C2 = 2.0 * static_cast<double>(c.dim);
  const double scales[4] = {16, 4, 1, 0.25};  // pixels per patch at each level
  double f = 0;
  for (int k = 0; k < 4; ++k) {
    const double out = static_cast<double>(c.dpt_out[k]), px = patches * scales[k];
    f += 2 * patches * C2 * out;        // 1x1 projection at the patch grid
    f += 2 * 9 * out * F * px;          // to the feature width
    f += 2 * (4 * 9 + 1) * F * F * px;  // fusion
  }
  f += 2 * 9 * F * (F / 2) * patches * 64;  // output head, twice the finest scale
  return 2 * f;                             // depth and confidence share it; the rest is small
}

double step_flops(const ModelConfig& c, double frames, double patches, double cached_frames) {
  const double dino_tokens = patches + 1 + static_cast<double>(c.registers);
  const double tokens = patches + ModelConfig::kSpecialTokens;
  double f = static_cast<double>(c.dino_depth) * block_flops(c, dino_tokens, dino_tokens);
  f += static_cast<double>(c.depth) * block_flops(c, tokens, tokens);  // frame blocks
  // Global blocks: the step's frames attend to the cache, themselves included.
  f += static_cast<double>(c.depth) * block_flops(c, tokens, tokens * cached_frames);
  f += depth_head_flops(c, patches);
  return f * frames;
}

// Sustained GEMM rate of this CPU with `threads` threads (0: all), measured once a process on
// a product of the shape the model's linear layers have (about 0.2 s).
double measured_cpu_flops(int threads) {
  static std::mutex m;
  static std::vector<std::pair<int, double>> known;
  std::lock_guard<std::mutex> lock(m);
  for (const auto& [t, rate] : known)
    if (t == threads) return rate;
  const int before = omp_get_max_threads();
  if (threads > 0) omp_set_num_threads(threads);
  constexpr int M = 256, N = 1024, K = 1024;
  std::vector<float> a(size_t(M) * K, 0.5f), b(size_t(K) * N, 0.25f), out(size_t(M) * N);
  auto gemm = [&] {
    cpu::sgemm(false, true, M, N, K, 1.f, a.data(), K, b.data(), K, 0.f, out.data(), N);
  };
  gemm();  // warm: threads started, pages touched
  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  int runs = 0;
  double s = 0;
  do {
    gemm();
    ++runs;
    s = std::chrono::duration<double>(Clock::now() - t0).count();
  } while (s < 0.15 && runs < 1000);
  omp_set_num_threads(before);
  const double rate = 2.0 * M * N * K * runs / s;
  known.emplace_back(threads, rate);
  return rate;
}

// Of the GEMM rate, what a whole CPU step sustains (attention, norms and the depth head's
// convolutions run slower than one large product). On 2 cores (OpenBLAS, 2 threads, real/loop
// frames, 4 scale frames) the seconds a frame after the scale block against this estimate at
// 0.6: tiny at 280 0.36 (0.30), tiny at 518 2.2 (3.3), the released architecture at 224 5.0
// (6.3); the estimate is for a full window, so it is the upper end of a run's frames.
constexpr double kCpuStepEfficiency = 0.6;
// Of the stated bf16 peak, what a GPU step sustained: 53.6 frames/s at 378x504, window 64, on an
// H100 80GB HBM3 (docs/PERFORMANCE.md) is 9.09 TFLOP a frame as counted above (6.8 of them the
// global attention over 72 cached frames) against 4096 x 132 SMs x 1.98 GHz.
constexpr double kGpuStepEfficiency = 0.45;

}  // namespace

double TimeEstimate::frame_seconds() const {
  return rate > 0 ? frame_flops / rate : 0;
}
double TimeEstimate::scale_block_seconds() const {
  return rate > 0 ? scale_block_flops / rate : 0;
}

TimeEstimate estimate_time(const RunPlan& p, const ModelConfig& config) {
  TimeEstimate t;
  const double patches = static_cast<double>((p.height / config.patch) * (p.width / config.patch));
  const StreamOptions& s = p.windowed ? p.windowed->stream : p.stream;
  const double scale = std::max(1, s.scale_frames);
  const double window = std::max(1, s.window);
  const double frames = static_cast<double>(std::max<int64_t>(p.frames, 1));
  const double first = std::min(scale, frames);
  t.scale_block_flops = step_flops(config, first, patches, first);
  t.frame_flops = step_flops(config, 1, patches, std::min(frames, scale + window));
  const int gpu = cuda_device_index(p.engine.device);
  if (gpu >= 0) {
    double peak = 0;
    if (cuda_peak_bf16_flops(gpu, &peak, &t.device)) t.rate = peak * kGpuStepEfficiency;
  } else {
    const int threads = p.engine.threads > 0 ? p.engine.threads : omp_get_max_threads();
    t.rate = measured_cpu_flops(p.engine.threads) * kCpuStepEfficiency;
    t.device = "the CPU (" + std::to_string(threads) + (threads == 1 ? " thread, " : " threads, ") +
               cpu::blas_name() + ")";
  }
  return t;
}

}  // namespace lingbot
