// Long streams: the cache's memory grows only by the special-token stream, exactly as the
// preflight computes, and per-frame results stay finite. The default run is short enough for
// the suite; LINGBOT_SOAK_FRAMES=10000 runs the long soak (minutes on 2 cores).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <random>

#include "lingbot/engine.h"
#include "model/config.h"
#include "stream/preflight.h"

namespace lingbot {
namespace {

int64_t soak_frames() {
  const char* v = std::getenv("LINGBOT_SOAK_FRAMES");
  return v && *v ? std::atoll(v) : 400;
}

TEST(Soak, CacheMemoryGrowsOnlyAsPreflightComputes) {
  const StreamOptions opt{.scale_frames = 2, .window = 4, .keyframe_interval = 1,
                          .camera_iterations = 1};
  auto engine = Engine::create({.model = "synthetic:1", .arch = "tiny"});
  auto session = engine->start(opt);
  const ModelConfig cfg = ModelConfig::preset("tiny");
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(0.f, 1.f);
  Tensor frame = Tensor::zeros({3, 28, 28});
  const int64_t frames = soak_frames();
  int64_t seen = 0;
  bool finite = true;
  for (int64_t i = 0; i < frames; ++i) {
    for (int64_t j = 0; j < frame.numel(); ++j) frame.f32()[j] = u(rng);
    session->push(frame, [&](const FrameResult& r) {
      ++seen;
      for (float v : r.pose_enc) finite &= std::isfinite(v);
    });
    if (i + 1 < opt.scale_frames) continue;
    const CacheStats s = session->cache_stats();
    // Pages never grow; the stream grows by whole chunks of evicted frames' specials.
    ASSERT_EQ(s.scale_pages + s.live_pages + s.free_pages, opt.scale_frames + opt.window + 1);
    ASSERT_EQ(s.stored_frames, i + 1);
    ASSERT_EQ(s.special_tokens, 6 * (i + 1));
    const MemoryEstimate m = estimate_memory(cfg, DType::F32, 28, 28, i + 1, opt);
    ASSERT_EQ(s.bytes_reserved * s.layers, m.kv_cache) << "after frame " << i;
  }
  EXPECT_EQ(seen, frames);
  EXPECT_TRUE(finite);
}

}  // namespace
}  // namespace lingbot
