// Long streams: the caches' memory grows only by the special-token stream and the camera-head
// caches, exactly as the preflight computes, and with max_special_frames it stops growing once
// the cap is reached. The default runs are short enough for the suite; LINGBOT_SOAK_FRAMES=10000
// runs the long soak (CTest label `soak`, see tests/CMakeLists.txt), which prints a progress
// line every 1000 frames: the uncapped run slows down as it goes, as each frame attends to all
// earlier frames' specials (on 2 CPU cores: 12 minutes uncapped, 2.5 capped).
//
// LINGBOT_SOAK_DEVICE=cuda runs the same checks on the GPU backend (default: cpu); they skip
// where there is no CUDA device.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <random>
#include <string>

#include "backend/ops.h"
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

// The backend the soak runs on: "cpu" unless LINGBOT_SOAK_DEVICE says otherwise.
std::string soak_device() {
  const char* v = std::getenv("LINGBOT_SOAK_DEVICE");
  return v && *v ? v : "cpu";
}

// The tiny model as the engine configures it for "auto" precision on `device` (f32 on the CPU;
// bf16 on the GPU, with the e4m3 KV cache where the GPU reads it). The camera-head caches are
// F32 on both (Model::make_camera_cache).
ModelConfig auto_config(const std::string& device) {
  ModelConfig cfg = ModelConfig::preset("tiny");
  const bool cuda = device == "cuda";
  resolve_precision("auto", cuda, !cuda || cuda_reads_fp8_kv(0), cfg);
  return cfg;
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
  const std::string device = soak_device();
  ASSERT_TRUE(device == "cpu" || device == "cuda")
      << "LINGBOT_SOAK_DEVICE=" << device << ": expected cpu or cuda";
  if (device == "cuda") {
    std::string why;
    if (!make_cuda_backend(&why))
      GTEST_SKIP() << "LINGBOT_SOAK_DEVICE=cuda but no CUDA backend here: " << why;
  }
  auto engine = Engine::create({.model = "synthetic:1", .arch = "tiny", .device = device});
  auto session = engine->start(opt);
  const ModelConfig cfg = auto_config(device);
  // What the memory check watches. On the CPU, the resident set: the caches are host memory.
  // On the GPU they are device memory, so the device memory in use (the driver's view, which
  // counts the whole device: run it alone); the stream-ordered pool it comes from rounds the
  // chunks' allocations up to its own blocks, hence the larger slack.
  const auto memory_used = [&]() -> int64_t {
    return device == "cuda" ? static_cast<int64_t>(engine->device_memory_used()) : rss_kb() * 1024;
  };
  const char* memory_name = device == "cuda" ? "device memory" : "resident set";
  const auto started = std::chrono::steady_clock::now();
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
  // Memory use is compared over the second half (or what follows the flat point).
  const int64_t memory_from =
      opt.max_special_frames > 0 ? std::max(frames / 2, flat_from) : frames / 2;
  int64_t memory_start = 0;
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
      const MemoryEstimate m = estimate_memory(cfg, cfg.compute, kSize, kSize, i + 1, opt);
      ASSERT_EQ(want.kv, m.kv_cache);
      ASSERT_EQ(want.camera, m.camera_cache);
    }
    if (i + 1 == flat_from) flat = s;
    if (i + 1 > flat_from) {
      ASSERT_EQ(s.bytes_reserved, flat.bytes_reserved) << "after frame " << i;
      ASSERT_EQ(s.camera_cache_bytes_reserved, flat.camera_cache_bytes_reserved) << i;
    }
    const size_t caches = s.bytes_reserved * s.layers + s.camera_cache_bytes_reserved;
    if ((i + 1) % 1000 == 0) {
      std::printf("[ soak ] %s, cap %lld: frame %lld, %.0f s, caches %.1f MB\n", device.c_str(),
                  static_cast<long long>(opt.max_special_frames), static_cast<long long>(i + 1),
                  std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count(),
                  caches / 1e6);
      std::fflush(stdout);
    }
    if (i + 1 == memory_from) {
      memory_start = memory_used();
      cache_start = caches;
    }
    if (i + 1 == frames && memory_start > 0 && memory_from < frames) {
      // Nothing else may grow with the sequence: allow the caches' growth plus allocator slack.
      const size_t cache_growth = caches - cache_start;
      const int64_t growth = memory_used() - memory_start;
      std::printf(
          "[ soak ] %s, %lld frames, cap %lld: caches %.1f MB, grew %.1f MB in the last "
          "stretch; %s grew %.1f MB\n",
          device.c_str(), static_cast<long long>(frames),
          static_cast<long long>(opt.max_special_frames), caches / 1e6, cache_growth / 1e6,
          memory_name, growth / 1e6);
      const int64_t slack =
          device == "cuda" ? (64 << 20) + static_cast<int64_t>(cache_growth / 8) : (16 << 20);
      EXPECT_LE(growth, static_cast<int64_t>(cache_growth) + slack);
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
