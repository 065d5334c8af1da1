// Long streams: the caches' memory grows only by the special-token stream and the camera-head
// caches, exactly as the preflight computes, and with max_special_frames it stops growing once
// the cap is reached. The default runs are short enough for the suite; LINGBOT_SOAK_FRAMES=10000
// runs the long soak (CTest label `soak`, see tests/CMakeLists.txt): on 2 shared CPU cores the
// uncapped 10,000 frames alone take over an hour, as each frame attends to all earlier
// frames' specials.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <random>
#include <string>

#include "cache/camera_cache.h"
#include "cache/paged_kv.h"
#include "lingbot/engine.h"
#include "model/config.h"
#include "model/model.h"
#include "stream/preflight.h"
#include "stream/session.h"

namespace lingbot {
namespace {

constexpr int64_t kSize = 28;  // the smallest input: 2 x 2 patches
constexpr int64_t kCameraDepth = 4, kCameraChunk = 64;

int64_t soak_frames(int64_t fallback) {
  const char* v = std::getenv("LINGBOT_SOAK_FRAMES");
  return v && *v ? std::atoll(v) : fallback;
}

// Resident set of this process (kB), 0 where unknown.
int64_t rss_kb() {
  std::ifstream f("/proc/self/status");
  for (std::string line; std::getline(f, line);)
    if (line.rfind("VmRSS:", 0) == 0) return std::atoll(line.c_str() + 6);
  return 0;
}

struct Expected {
  size_t kv, camera;
};

// What the caches hold after `frames` frames (all keyframes) under `opt`.
Expected expected(const ModelConfig& cfg, const StreamOptions& opt, int64_t frames) {
  const KVCacheConfig kv = kv_cache_config(cfg, kSize, kSize, opt);
  const int64_t slots = opt.camera_iterations * kCameraDepth;
  return {PagedKVCache::bytes_for(kv, frames),
          CameraCache::bytes_for(slots, 2 * cfg.dim, DType::F32, kCameraChunk, frames,
                                 camera_limit(opt))};
}

void soak(const StreamOptions& opt, int64_t frames) {
  auto engine = Engine::create({.model = "synthetic:1", .arch = "tiny"});
  auto session = engine->start(opt);
  const ModelConfig cfg = ModelConfig::preset("tiny");
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(0.f, 1.f);
  Tensor frame = Tensor::zeros({3, kSize, kSize});
  int64_t seen = 0;
  bool finite = true;
  // Memory is flat once the stream and the camera caches have reached their caps plus a chunk.
  const int64_t resident = opt.scale_frames + opt.window;
  const int64_t flat_from = opt.max_special_frames > 0 ? resident + opt.max_special_frames +
                                                             std::max<int64_t>(256, kCameraChunk)
                                                       : frames;
  CacheStats flat{};
  // The resident set is compared over the second half (or what follows the flat point).
  const int64_t rss_from =
      opt.max_special_frames > 0 ? std::max(frames / 2, flat_from) : frames / 2;
  int64_t rss_start = 0;
  size_t cache_start = 0;
  for (int64_t i = 0; i < frames; ++i) {
    for (int64_t j = 0; j < frame.numel(); ++j) frame.f32()[j] = u(rng);
    session->push(frame, [&](const FrameResult& r) {
      ++seen;
      for (float v : r.pose_enc) finite &= std::isfinite(v);
    });
    if (i + 1 < opt.scale_frames) continue;
    const CacheStats s = session->cache_stats();
    // Pages never grow; only the stream and the camera caches do, by whole chunks.
    ASSERT_EQ(s.scale_pages + s.live_pages + s.free_pages, opt.scale_frames + opt.window + 1);
    ASSERT_EQ(s.stored_frames, i + 1);
    const int64_t evicted = std::max<int64_t>(i + 1 - resident, 0);
    const int64_t kept =
        opt.max_special_frames > 0 ? std::min(evicted, opt.max_special_frames) : evicted;
    ASSERT_EQ(s.special_frames, kept);
    ASSERT_EQ(s.special_tokens, 6 * (i + 1 - evicted + kept));
    const Expected want = expected(cfg, opt, i + 1);
    ASSERT_EQ(s.bytes_reserved * s.layers, want.kv) << "after frame " << i;
    ASSERT_EQ(s.camera_cache_bytes_reserved, want.camera) << "after frame " << i;
    if (opt.max_special_frames == 0) {
      const MemoryEstimate m = estimate_memory(cfg, DType::F32, kSize, kSize, i + 1, opt);
      ASSERT_EQ(want.kv, m.kv_cache);
      ASSERT_EQ(want.camera, m.camera_cache);
    }
    if (i + 1 == flat_from) flat = s;
    if (i + 1 > flat_from) {
      ASSERT_EQ(s.bytes_reserved, flat.bytes_reserved) << "after frame " << i;
      ASSERT_EQ(s.camera_cache_bytes_reserved, flat.camera_cache_bytes_reserved) << i;
    }
    if (i + 1 == rss_from) {
      rss_start = rss_kb();
      cache_start = s.bytes_reserved * s.layers + s.camera_cache_bytes_reserved;
    }
    if (i + 1 == frames && rss_start > 0 && rss_from < frames) {
      // Nothing else may grow with the sequence: allow the caches' growth plus allocator slack.
      const size_t cache_growth =
          s.bytes_reserved * s.layers + s.camera_cache_bytes_reserved - cache_start;
      const int64_t growth_kb = rss_kb() - rss_start;
      std::printf(
          "[ soak ] %lld frames, cap %lld: caches %.1f MB, grew %.1f MB in the last "
          "stretch; resident set grew %.1f MB\n",
          static_cast<long long>(frames), static_cast<long long>(opt.max_special_frames),
          (s.bytes_reserved * s.layers + s.camera_cache_bytes_reserved) / 1e6, cache_growth / 1e6,
          growth_kb / 1e3);
      EXPECT_LE(growth_kb * 1024, static_cast<int64_t>(cache_growth) + (16 << 20));
    }
  }
  session->finish([&](const FrameResult& r) {  // the last frame's results come out here
    ++seen;
    for (float v : r.pose_enc) finite &= std::isfinite(v);
  });
  EXPECT_EQ(seen, frames);
  EXPECT_TRUE(finite);
}

TEST(Soak, CacheMemoryGrowsOnlyAsPreflightComputes) {
  soak({.scale_frames = 2, .window = 4, .keyframe_interval = 1, .camera_iterations = 1},
       soak_frames(400));
}

TEST(Soak, CappedCacheMemoryStaysFlat) {
  soak({.scale_frames = 2,
        .window = 4,
        .keyframe_interval = 1,
        .camera_iterations = 1,
        .max_special_frames = 100},
       soak_frames(700));
}

}  // namespace
}  // namespace lingbot
