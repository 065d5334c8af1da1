// The time preflight: its FLOP count against the architecture's definitions, and the rate it
// divides by.
#include <gtest/gtest.h>

#include <string>

#include "lingbot/preflight.h"
#include "model/config.h"
#include "stream/preflight.h"

namespace lingbot {
namespace {

RunPlan cpu_plan(int64_t height, int64_t width, int64_t frames, int scale, int window) {
  RunPlan p;
  p.engine.device = "cpu";
  p.engine.threads = 1;
  p.height = height;
  p.width = width;
  p.frames = frames;
  p.stream.scale_frames = scale;
  p.stream.window = window;
  return p;
}

// Only the global layers' attention grows with the cache: a frame's tokens (patches and the
// special tokens) against every cached frame's, Q.K^T and P.V, two FLOP a multiply-add.
TEST(TimeEstimate, AttentionGrowsWithTheCacheAsDefined) {
  for (const char* arch : {"tiny", "lingbot-map"}) {
    SCOPED_TRACE(arch);
    const ModelConfig c = ModelConfig::preset(arch);
    const int64_t h = c.patch * 6, w = c.patch * 8;
    const double tokens = 6 * 8 + ModelConfig::kSpecialTokens;
    const double per_cached_frame =
        static_cast<double>(c.depth) * 2 * 2 * tokens * tokens * static_cast<double>(c.dim);
    // min(frames, scale + window) frames cached: 14 and 24.
    const TimeEstimate a = estimate_time(cpu_plan(h, w, 1000, 4, 10), c);
    const TimeEstimate b = estimate_time(cpu_plan(h, w, 1000, 4, 20), c);
    EXPECT_NEAR(b.frame_flops - a.frame_flops, 10 * per_cached_frame, 1e-9 * b.frame_flops);
    // A run shorter than scale + window caches all its frames, no more.
    const TimeEstimate s = estimate_time(cpu_plan(h, w, 16, 4, 20), c);
    EXPECT_NEAR(b.frame_flops - s.frame_flops, 8 * per_cached_frame, 1e-9 * b.frame_flops);
  }
}

// The scale block is its frames together, each attending to all of them: for a run of exactly
// the scale frames, as many times a frame's FLOPs as there are frames.
TEST(TimeEstimate, ScaleBlockIsItsFramesTogether) {
  const ModelConfig c = ModelConfig::preset("tiny");
  const TimeEstimate t = estimate_time(cpu_plan(c.patch * 4, c.patch * 5, 4, 4, 10), c);
  EXPECT_GT(t.frame_flops, 0);
  EXPECT_NEAR(t.scale_block_flops, 4 * t.frame_flops, 1e-12 * t.scale_block_flops);
}

// The figure docs/PERFORMANCE.md's GPU efficiency is calibrated from: the released
// architecture at 378x504 with 8 scale frames and a window of 64 counts 9.09 TFLOP a frame.
TEST(TimeEstimate, ReleasedModelAtTheProfilerSettings) {
  const TimeEstimate t =
      estimate_time(cpu_plan(378, 504, 300, 8, 64), ModelConfig::preset("lingbot-map"));
  EXPECT_NEAR(t.frame_flops / 1e12, 9.09, 0.01);
}

// On the CPU the rate is measured here: positive, named, and what the seconds divide by.
TEST(TimeEstimate, CpuRateIsMeasured) {
  const ModelConfig c = ModelConfig::preset("tiny");
  const TimeEstimate t = estimate_time(cpu_plan(c.patch * 4, c.patch * 5, 20, 4, 10), c);
  ASSERT_GT(t.rate, 0);
  EXPECT_NE(t.device.find("CPU (1 thread,"), std::string::npos) << t.device;
  EXPECT_DOUBLE_EQ(t.frame_seconds(), t.frame_flops / t.rate);
  EXPECT_DOUBLE_EQ(t.scale_block_seconds(), t.scale_block_flops / t.rate);
}

}  // namespace
}  // namespace lingbot
