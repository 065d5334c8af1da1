// The memory preflight: parameter counts from shapes alone, cache terms that agree with what a
// real session and camera cache allocate, and a shortfall line a user can act on.
#include "stream/preflight.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "backend/ops.h"
#include "cache/camera_cache.h"
#include "lingbot/engine.h"

namespace lingbot {
namespace {

const ModelConfig kReleased = ModelConfig::preset("lingbot-map");
const ModelConfig kTiny = ModelConfig::preset("tiny");

TEST(Preflight, CountsTheParametersTheModelReads) {
  EXPECT_EQ(count_parameters(kReleased), 1157942516u);
  EXPECT_EQ(count_parameters(kTiny), 14103812u);
  auto engine = Engine::create({.model = "synthetic:1", .arch = "tiny"});
  EXPECT_EQ(engine->info().parameters, count_parameters(kTiny));
}

TEST(Preflight, WeightsFollowTheComputeDtype) {
  const StreamOptions s;
  const size_t f32 = estimate_memory(kReleased, DType::F32, 378, 504, 300, s).weights;
  const size_t bf16 = estimate_memory(kReleased, DType::BF16, 378, 504, 300, s).weights;
  EXPECT_EQ(f32, 4 * count_parameters(kReleased));
  // The transformer and camera-head matrices halve; the depth head and the vectors stay F32.
  EXPECT_GT(bf16, f32 / 2);
  EXPECT_LT(bf16, f32 / 2 + 200'000'000u);
}

TEST(Preflight, StoredFramesFollowTheKeyframeInterval) {
  StreamOptions s{.scale_frames = 8, .keyframe_interval = 1};
  EXPECT_EQ(stored_frames(300, s), 300);
  EXPECT_EQ(stored_frames(5, s), 5);
  s.keyframe_interval = 3;
  EXPECT_EQ(stored_frames(300, s), 8 + 98);  // frames 8, 11, ..., 299
  EXPECT_EQ(stored_frames(9, s), 9);
}

// The KV and camera terms are what a real tiny session holds after the sequence.
void expect_caches_match(const StreamOptions& options, int64_t frames) {
  SCOPED_TRACE("keyframe interval " + std::to_string(options.keyframe_interval) + ", " +
               std::to_string(frames) + " frames");
  const int64_t h = 56, w = 70;
  auto engine = Engine::create({.model = "synthetic:1", .arch = "tiny"});
  auto session = engine->start(options);
  Tensor image = Tensor::zeros({3, h, w});
  for (int64_t i = 0; i < image.numel(); ++i) image.f32()[i] = static_cast<float>(i % 97) / 97.f;
  for (int64_t f = 0; f < frames; ++f) session->push(image, [](const FrameResult&) {});
  session->finish([](const FrameResult&) {});
  const CacheStats stats = session->cache_stats();
  const MemoryEstimate m = estimate_memory(kTiny, DType::F32, h, w, frames, options);
  EXPECT_EQ(stats.stored_frames, stored_frames(frames, options));
  EXPECT_EQ(m.kv_cache, stats.bytes_reserved * static_cast<size_t>(stats.layers));

  auto backend = make_cpu_backend(1);
  const int64_t heads = kTiny.camera_heads, head_dim = 2 * kTiny.dim / heads;
  CameraCache camera(*backend, options.camera_iterations, 4, heads, head_dim);
  Tensor row = Tensor::zeros({1, heads, head_dim});
  for (int64_t f = 0; f < stats.stored_frames; ++f)
    for (int it = 0; it < options.camera_iterations; ++it)
      for (int b = 0; b < 4; ++b) camera.append(it, b, row, row);
  EXPECT_EQ(m.camera_cache, camera.bytes_reserved());
}

TEST(Preflight, CacheTermsMatchARealSession) {
  // 40 frames through a window of 6 evict into the special stream; 70 stored frames pass the
  // camera cache's first chunk of 64.
  expect_caches_match({.scale_frames = 4, .window = 6, .keyframe_interval = 1}, 40);
  expect_caches_match({.scale_frames = 4, .window = 6, .keyframe_interval = 2}, 23);
  expect_caches_match(
      {.scale_frames = 4, .window = 6, .keyframe_interval = 1, .camera_iterations = 2}, 70);
}

TEST(Preflight, GrowsWithFramesWindowAndResolution) {
  const StreamOptions s;
  auto total = [](const StreamOptions& o, int64_t h, int64_t w, int64_t frames) {
    return estimate_memory(kReleased, DType::BF16, h, w, frames, o).total;
  };
  EXPECT_LT(total(s, 378, 504, 100), total(s, 378, 504, 1000));
  EXPECT_LT(total(s, 378, 504, 1000), total(s, 378, 504, 10000));
  StreamOptions small = s, large = s;
  small.window = 16;
  large.window = 128;
  EXPECT_LT(total(small, 378, 504, 300), total(s, 378, 504, 300));
  EXPECT_LT(total(s, 378, 504, 300), total(large, 378, 504, 300));
  EXPECT_LT(total(s, 280, 378, 300), total(s, 378, 504, 300));
  EXPECT_LT(total(s, 378, 504, 300), total(s, 518, 686, 300));
  StreamOptions sparse = s;
  sparse.keyframe_interval = 4;
  EXPECT_LT(total(sparse, 378, 504, 1000), total(s, 378, 504, 1000));
}

TEST(Preflight, ReleasedModelIsNearTheMeasuredPeak) {
  // docs/PERFORMANCE.md: 11.9 GB peak on an H200 (whole process, CUDA context included) for
  // 300 frames at 378x504, window 64, bf16, of which ~2.4 GB are weights.
  const MemoryEstimate m = estimate_memory(kReleased, DType::BF16, 378, 504, 300, StreamOptions{});
  EXPECT_NEAR(m.weights / 1e9, 2.4, 0.1);
  EXPECT_GT(m.total / 1e9, 11.0);
  EXPECT_LT(m.total / 1e9, 14.0);
}

TEST(Preflight, ShortfallNamesTheNumbersAndAFix) {
  const StreamOptions s;
  const MemoryEstimate m = estimate_memory(kReleased, DType::BF16, 378, 504, 300, s);
  const size_t available = m.total - 2'000'000'000;
  const std::string line =
      explain_shortfall(m, available, kReleased, DType::BF16, 378, 504, 300, s);
  EXPECT_EQ(line.find('\n'), std::string::npos) << line;
  EXPECT_NE(line.find("needs ~" + format_gb(m.total)), std::string::npos) << line;
  EXPECT_NE(line.find("weights " + format_gb(m.weights)), std::string::npos) << line;
  EXPECT_NE(line.find("KV cache " + format_gb(m.kv_cache)), std::string::npos) << line;
  EXPECT_NE(line.find(format_gb(available) + " available"), std::string::npos) << line;
  EXPECT_NE(line.find("--window "), std::string::npos) << line;
  EXPECT_NE(line.find("--size "), std::string::npos) << line;

  // The suggested window fits, the next larger one does not.
  const size_t at = line.find("--window ") + 9;
  const int window = std::stoi(line.substr(at));
  StreamOptions fit = s, over = s;
  fit.window = window;
  over.window = window + 1;
  EXPECT_LE(estimate_memory(kReleased, DType::BF16, 378, 504, 300, fit).total, available);
  EXPECT_GT(estimate_memory(kReleased, DType::BF16, 378, 504, 300, over).total, available);

  // On a long run the special-token stream dominates, and sparser keyframes shrink it.
  const MemoryEstimate longer = estimate_memory(kReleased, DType::BF16, 378, 504, 100000, s);
  const std::string sparse =
      explain_shortfall(longer, longer.total * 9 / 10, kReleased, DType::BF16, 378, 504, 100000, s);
  EXPECT_NE(sparse.find("--keyframe-interval 2"), std::string::npos) << sparse;

  const std::string hopeless =
      explain_shortfall(m, 1'000'000, kReleased, DType::BF16, 378, 504, 300, s);
  EXPECT_NE(hopeless.find("no single setting fits"), std::string::npos) << hopeless;
}

TEST(Preflight, LongestWindowIsTheFirstWindowOfThePlan) {
  for (int64_t frames : {1, 3, 16, 64, 65, 200, 1000})
    for (int size : {1, 6, 16, 64})
      for (int k : {1, 3}) {
        const WindowedOptions o{
            .window_size = size, .overlap = 2, .scale_frames = 4, .keyframe_interval = k};
        int64_t longest = 0;
        for (const auto& [b, e] : plan_windows(frames, o)) longest = std::max(longest, e - b);
        EXPECT_EQ(longest_window(frames, o), longest) << frames << " " << size << " " << k;
      }
}

// A windowed run resets its session per window: what it holds does not depend on the length of
// the sequence, only on the window, and equals a streaming run of the longest window.
TEST(Preflight, WindowedMemoryIsBoundedByTheWindow) {
  const WindowedOptions o{.window_size = 64, .overlap = 16, .scale_frames = 8};
  const auto windowed = [&](int64_t frames) {
    return estimate_windowed_memory(kReleased, DType::BF16, 378, 504, frames, o);
  };
  const MemoryEstimate a = windowed(200), b = windowed(100000);
  EXPECT_EQ(a.total, b.total);
  EXPECT_EQ(a.kv_cache, b.kv_cache);
  const StreamOptions s = window_stream_options(o);
  EXPECT_EQ(s.window, o.sliding_window);
  EXPECT_EQ(s.scale_frames, 8);
  EXPECT_EQ(a.total, estimate_memory(kReleased, DType::BF16, 378, 504, 64, s).total);
  // A streaming run of the same video keeps every keyframe's specials.
  EXPECT_LT(b.total, estimate_memory(kReleased, DType::BF16, 378, 504, 100000, s).total);
  // A short video is one shorter window.
  EXPECT_EQ(windowed(20).total, estimate_memory(kReleased, DType::BF16, 378, 504, 20, s).total);
  // Sparser keyframes stretch the window in frames, not in cached frames.
  WindowedOptions sparse = o;
  sparse.keyframe_interval = 4;
  EXPECT_EQ(longest_window(1000, sparse), 8 + 56 * 4);
  EXPECT_EQ(estimate_windowed_memory(kReleased, DType::BF16, 378, 504, 1000, sparse).kv_cache,
            a.kv_cache);
}

TEST(Preflight, WindowedWithFlowCachesAtMostTheWindowSize) {
  WindowedOptions o{.window_size = 64, .overlap = 16, .scale_frames = 8};
  o.flow_threshold = 2;
  EXPECT_EQ(window_cached_frames(5000, o), 64);
  EXPECT_EQ(window_cached_frames(40, o), 40);
  EXPECT_EQ(estimate_windowed_memory(kReleased, DType::BF16, 378, 504, 5000, o).total,
            estimate_windowed_memory(kReleased, DType::BF16, 378, 504, 64, o).total);
  o.window_size = 4;  // shorter than the scale block: a window is its scale frames
  EXPECT_EQ(window_cached_frames(5000, o), 8);
}

TEST(Preflight, WindowedCacheTermsMatchARealSessionOfTheLongestWindow) {
  // Window 14 > scale 4 + sliding window 6: the window evicts into the special stream.
  const WindowedOptions o{.window_size = 14, .overlap = 2, .scale_frames = 4, .sliding_window = 6};
  const StreamOptions s = window_stream_options(o);
  const MemoryEstimate m = estimate_windowed_memory(kTiny, DType::F32, 56, 70, 40, o);
  EXPECT_EQ(m.kv_cache, estimate_memory(kTiny, DType::F32, 56, 70, 14, s).kv_cache);
  expect_caches_match(s, longest_window(40, o));
}

TEST(Preflight, WindowedShortfallSuggestsWindowKnobs) {
  const WindowedOptions o{
      .window_size = 128, .overlap = 16, .scale_frames = 8, .sliding_window = 64};
  const MemoryEstimate m = estimate_windowed_memory(kReleased, DType::BF16, 378, 504, 5000, o);
  // Less than the special stream of the 56 keyframes evicted past the sliding window.
  const size_t available = m.total - 100'000'000;
  const std::string line =
      explain_windowed_shortfall(m, available, kReleased, DType::BF16, 378, 504, 5000, o);
  EXPECT_EQ(line.find('\n'), std::string::npos) << line;
  EXPECT_NE(line.find("needs ~" + format_gb(m.total)), std::string::npos) << line;
  EXPECT_NE(line.find("KV cache " + format_gb(m.kv_cache)), std::string::npos) << line;
  EXPECT_NE(line.find("--window-size "), std::string::npos) << line;
  EXPECT_NE(line.find("--size "), std::string::npos) << line;
  EXPECT_EQ(line.find("--keyframe-interval"), std::string::npos) << line;

  // The suggested window size fits, the next larger one does not.
  const int size = std::stoi(line.substr(line.find("--window-size ") + 14));
  WindowedOptions fit = o, over = o;
  fit.window_size = size;
  over.window_size = size + 1;
  EXPECT_LE(estimate_windowed_memory(kReleased, DType::BF16, 378, 504, 5000, fit).total, available);
  EXPECT_GT(estimate_windowed_memory(kReleased, DType::BF16, 378, 504, 5000, over).total,
            available);
}

TEST(Preflight, ReadsHostMemory) {
  EXPECT_GT(host_memory_available(), 0u);
}

}  // namespace
}  // namespace lingbot
