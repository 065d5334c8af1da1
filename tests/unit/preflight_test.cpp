// The memory preflight: parameter counts from shapes alone, cache terms that agree with what a
// real session and camera cache allocate, and milder settings that fit.
#include "stream/preflight.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "backend/ops.h"
#include "cache/camera_cache.h"
#include "cache/paged_kv.h"
#include "lingbot/engine.h"
#include "lingbot/error.h"
#include "model/model.h"
#include "stream/windowed.h"

namespace lingbot {
namespace {

const ModelConfig kReleased = ModelConfig::preset("lingbot-map");

const ModelConfig kTiny = ModelConfig::preset("tiny");

TEST(Preflight, CountsTheParametersTheModelReads) {
  EXPECT_EQ(Model::parameters(kReleased).total(), 1157942516u);
  EXPECT_EQ(Model::parameters(kTiny).total(), 14103812u);
  auto engine = Engine::create({.model = "synthetic:1", .arch = "tiny"});
  EXPECT_EQ(engine->info().parameters, Model::parameters(kTiny).total());
}

TEST(Preflight, WeightsFollowTheComputeDtype) {
  const StreamOptions s;
  const size_t f32 = estimate_memory(kReleased, DType::F32, 378, 504, 300, s).weights;
  const size_t bf16 = estimate_memory(kReleased, DType::BF16, 378, 504, 300, s).weights;
  EXPECT_EQ(f32, 4 * Model::parameters(kReleased).total());
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

// The preflight resolves the precision as the engine does: "fp8" stores the KV cache in e4m3
// (a quarter of the f32 cache on the CPU), and the bytes it plans are what a session of that
// engine reserves.
TEST(Preflight, Fp8PrecisionPlansTheE4m3Cache) {
  RunPlan plan;
  plan.engine = {.model = "synthetic:1", .arch = "tiny", .device = "cpu"};
  plan.height = 56;
  plan.width = 70;
  plan.frames = 30;
  plan.stream = {.scale_frames = 4, .window = 6};
  const Preflight f32 = preflight(plan);
  plan.engine.precision = "fp8";
  const Preflight f8 = preflight(plan);
  EXPECT_EQ(f32.kv_cache, DType::F32);
  EXPECT_EQ(f8.kv_cache, DType::F8E4M3);
  EXPECT_EQ(f8.compute, DType::F32);
  EXPECT_EQ(f8.need.kv_cache * 4, f32.need.kv_cache);
  auto engine = Engine::create(plan.engine);
  auto session = engine->start(plan.stream);
  Tensor frame = Tensor::zeros({3, 56, 70});
  for (int64_t i = 0; i < plan.frames; ++i) session->push(frame, [](const FrameResult&) {});
  session->finish([](const FrameResult&) {});
  const CacheStats s = session->cache_stats();
  EXPECT_EQ(s.bytes_reserved * s.layers, f8.need.kv_cache);
  // A GPU that does not read e4m3 (here: none at all) refuses "fp8" with a reason.
  plan.engine.device = "cuda";
  if (!cuda_reads_fp8_kv(0)) EXPECT_THROW(preflight(plan), Error);
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

// The dry run lists the activations' parts; they add up to the total, and the first step (8
// frames at once) outweighs a one-frame step by about the frames.
TEST(Preflight, ActivationPartsAddUp) {
  const MemoryEstimate m = estimate_memory(kReleased, DType::BF16, 378, 504, 300, StreamOptions{});
  const MemoryEstimate::ActivationParts& a = m.activation_parts;
  const size_t work = a.first_step + a.one_frame_steps + a.depth_plan + a.scratch;
  EXPECT_EQ(a.margin, work / 10);
  EXPECT_EQ(m.activations, work + a.margin);
  EXPECT_GT(a.first_step, 6 * a.one_frame_steps);
  EXPECT_LT(a.first_step, 9 * a.one_frame_steps);
  EXPECT_GT(a.depth_plan, 0u);
  EXPECT_GT(a.scratch, 0u);
}

TEST(Preflight, MilderSettingsFitAndTheNextStepDoesNot) {
  const StreamOptions s;
  const MemoryEstimate m = estimate_memory(kReleased, DType::BF16, 378, 504, 300, s);
  const size_t available = m.total - 2'000'000'000;
  const MilderSettings milder =
      milder_settings(kReleased, DType::BF16, 378, 504, 300, s, nullptr, available);
  ASSERT_TRUE(milder.window);
  EXPECT_FALSE(milder.window_size);  // a windowed setting

  // The suggested window fits, the next larger one does not.
  StreamOptions fit = s, over = s;
  fit.window = *milder.window;
  over.window = *milder.window + 1;
  EXPECT_LE(estimate_memory(kReleased, DType::BF16, 378, 504, 300, fit).total, available);
  EXPECT_GT(estimate_memory(kReleased, DType::BF16, 378, 504, 300, over).total, available);
  // So does the smaller input, of the same aspect, one patch narrower does not.
  ASSERT_TRUE(milder.input_width && milder.input_height);
  EXPECT_EQ(*milder.input_width % 14, 0);
  EXPECT_EQ(*milder.input_height, 378 * *milder.input_width / 504 / 14 * 14);
  EXPECT_LE(
      estimate_memory(kReleased, DType::BF16, *milder.input_height, *milder.input_width, 300, s)
          .total,
      available);
  const int wider = *milder.input_width + 14, wider_h = 378 * wider / 504 / 14 * 14;
  if (wider < 504)
    EXPECT_GT(estimate_memory(kReleased, DType::BF16, wider_h, wider, 300, s).total, available);

  // On a long run the special-token stream dominates, and sparser keyframes shrink it.
  const MemoryEstimate longer = estimate_memory(kReleased, DType::BF16, 378, 504, 100000, s);
  const MilderSettings sparse =
      milder_settings(kReleased, DType::BF16, 378, 504, 100000, s, nullptr, longer.total * 9 / 10);
  EXPECT_EQ(sparse.keyframe_interval, 2);

  const MilderSettings hopeless =
      milder_settings(kReleased, DType::BF16, 378, 504, 300, s, nullptr, 1'000'000);
  EXPECT_FALSE(hopeless.window || hopeless.keyframe_interval || hopeless.scale_frames ||
               hopeless.input_width || hopeless.max_special_frames);
}

TEST(Preflight, LongestWindowIsTheFirstWindowOfThePlan) {
  for (int64_t frames : {1, 3, 16, 64, 65, 200, 1000})
    for (int size : {1, 6, 16, 64})
      for (int k : {1, 3}) {
        const WindowedOptions o{.window_size = size,
                                .overlap = 2,
                                .stream = {.scale_frames = 4, .keyframe_interval = k}};
        int64_t longest = 0;
        for (const auto& [b, e] : plan_windows(frames, o)) longest = std::max(longest, e - b);
        EXPECT_EQ(longest_window(frames, o), longest) << frames << " " << size << " " << k;
      }
}

// A windowed run resets its session per window: what it holds does not depend on the length of
// the sequence, only on the window, and equals a streaming run of the longest window.
TEST(Preflight, WindowedMemoryIsBoundedByTheWindow) {
  const WindowedOptions o{.window_size = 64, .overlap = 16, .stream = {.scale_frames = 8}};
  const auto windowed = [&](int64_t frames) {
    return estimate_windowed_memory(kReleased, DType::BF16, 378, 504, frames, o);
  };
  const MemoryEstimate a = windowed(200), b = windowed(100000);
  EXPECT_EQ(a.total, b.total);
  EXPECT_EQ(a.kv_cache, b.kv_cache);
  const StreamOptions s = per_window_stream(o);
  EXPECT_EQ(s.window, 56);  // a window holds 8 scale frames and 56 keyframes
  EXPECT_EQ(s.scale_frames, 8);
  EXPECT_EQ(a.total, estimate_memory(kReleased, DType::BF16, 378, 504, 64, s).total);
  // A streaming run of the same video keeps every keyframe's specials.
  EXPECT_LT(b.total, estimate_memory(kReleased, DType::BF16, 378, 504, 100000, s).total);
  // A short video is one shorter window.
  EXPECT_EQ(windowed(20).total, estimate_memory(kReleased, DType::BF16, 378, 504, 20, s).total);
  // Sparser keyframes stretch the window in frames, not in cached frames.
  WindowedOptions sparse = o;
  sparse.stream.keyframe_interval = 4;
  EXPECT_EQ(longest_window(1000, sparse), 8 + 56 * 4);
  EXPECT_EQ(estimate_windowed_memory(kReleased, DType::BF16, 378, 504, 1000, sparse).kv_cache,
            a.kv_cache);
}

TEST(Preflight, WindowedWithFlowCachesAtMostTheWindowSize) {
  WindowedOptions o{.window_size = 64, .overlap = 16, .stream = {.scale_frames = 8}};
  o.stream.flow_threshold = 2;
  EXPECT_EQ(window_cached_frames(5000, o), 64);
  EXPECT_EQ(window_cached_frames(40, o), 40);
  EXPECT_EQ(estimate_windowed_memory(kReleased, DType::BF16, 378, 504, 5000, o).total,
            estimate_windowed_memory(kReleased, DType::BF16, 378, 504, 64, o).total);
  o.window_size = 4;  // shorter than the scale block: a window is its scale frames
  EXPECT_EQ(window_cached_frames(5000, o), 8);
}

TEST(Preflight, WindowedCacheTermsMatchARealSessionOfTheLongestWindow) {
  // Window 14 > scale 4 + sliding window 6: the window evicts into the special stream.
  const WindowedOptions o{
      .window_size = 14, .overlap = 2, .stream = {.scale_frames = 4, .window = 6}};
  const StreamOptions s = per_window_stream(o);
  const MemoryEstimate m = estimate_windowed_memory(kTiny, DType::F32, 56, 70, 40, o);
  EXPECT_EQ(m.kv_cache, estimate_memory(kTiny, DType::F32, 56, 70, 14, s).kv_cache);
  expect_caches_match(s, longest_window(40, o));
}

TEST(Preflight, WindowedMilderSettingsAreTheWindowKnobs) {
  const WindowedOptions o{
      .window_size = 128, .overlap = 16, .stream = {.scale_frames = 8, .window = 64}};
  const MemoryEstimate m = estimate_windowed_memory(kReleased, DType::BF16, 378, 504, 5000, o);
  // Less than the special stream of the 56 keyframes evicted past the sliding window.
  const size_t available = m.total - 100'000'000;
  const MilderSettings milder =
      milder_windowed_settings(kReleased, DType::BF16, 378, 504, 5000, o, nullptr, available);
  ASSERT_TRUE(milder.window_size);
  EXPECT_TRUE(milder.input_width);
  EXPECT_FALSE(milder.keyframe_interval || milder.scale_frames);  // streaming settings

  // The suggested window size fits, the next larger one does not.
  WindowedOptions fit = o, over = o;
  fit.window_size = *milder.window_size;
  over.window_size = *milder.window_size + 1;
  EXPECT_LE(estimate_windowed_memory(kReleased, DType::BF16, 378, 504, 5000, fit).total, available);
  EXPECT_GT(estimate_windowed_memory(kReleased, DType::BF16, 378, 504, 5000, over).total,
            available);
}

// --- The special-frame cap among the milder settings --------------------------------------

// The special-frame cap suggested, -1 if none.
int64_t suggested_cap(const MilderSettings& m) {
  return m.max_special_frames ? *m.max_special_frames : -1;
}

TEST(Preflight, ShortfallNamesTheLargestSpecialFrameCapThatFits) {
  // 100,000 frames: the special stream and camera caches dominate.
  const StreamOptions s;
  const int64_t frames = 100000;
  const MemoryEstimate m = estimate_memory(kReleased, DType::BF16, 378, 504, frames, s);
  StreamOptions capped = s;
  capped.max_special_frames = 5000;
  const size_t available =
      estimate_memory(kReleased, DType::BF16, 378, 504, frames, capped).total + 100'000'000;
  ASSERT_LT(available, m.total);
  const MilderSettings line =
      milder_settings(kReleased, DType::BF16, 378, 504, frames, s, nullptr, available);
  const int64_t cap = suggested_cap(line);
  ASSERT_GE(cap, 5000);
  EXPECT_LT(cap, frames - 8 - 64);  // below what the stream would hold anyway
  // The cap fits, the next larger one does not: the largest that fits.
  StreamOptions fit = s, over = s;
  fit.max_special_frames = cap;
  over.max_special_frames = cap + 1;
  EXPECT_LE(estimate_memory(kReleased, DType::BF16, 378, 504, frames, fit).total, available);
  EXPECT_GT(estimate_memory(kReleased, DType::BF16, 378, 504, frames, over).total, available);
  // Beside the other suggestions.
  EXPECT_TRUE(line.keyframe_interval);

  // A cap already set: a smaller one is suggested.
  StreamOptions already = s;
  already.max_special_frames = 50000;
  const MemoryEstimate ma = estimate_memory(kReleased, DType::BF16, 378, 504, frames, already);
  const MilderSettings lower =
      milder_settings(kReleased, DType::BF16, 378, 504, frames, already, nullptr, available);
  EXPECT_EQ(suggested_cap(lower), cap);
}

TEST(Preflight, NoSpecialFrameCapWhereNothingIsEvictedOrNoCapFits) {
  const StreamOptions s;  // scale 8 + window 64: 72 frames are never evicted
  const MemoryEstimate m = estimate_memory(kReleased, DType::BF16, 378, 504, 72, s);
  const MilderSettings line =
      milder_settings(kReleased, DType::BF16, 378, 504, 72, s, nullptr, m.total - 1'000'000);
  EXPECT_EQ(suggested_cap(line), -1);
  // Even a cap of 1 leaves the weights, the pool and activations: nothing fits.
  const MemoryEstimate longer = estimate_memory(kReleased, DType::BF16, 378, 504, 10000, s);
  const MilderSettings hopeless =
      milder_settings(kReleased, DType::BF16, 378, 504, 10000, s, nullptr, m.weights);
  EXPECT_EQ(suggested_cap(hopeless), -1);
}

// The bisection relies on the estimate never shrinking as the cap grows; a linear scan over
// every cap of a smaller run finds the same largest fit.
TEST(Preflight, SpecialFrameCapBisectionAgreesWithALinearScan) {
  const StreamOptions s{.scale_frames = 4, .window = 6, .keyframe_interval = 1};
  const int64_t frames = 1500;
  const MemoryEstimate m = estimate_memory(kTiny, DType::F32, 56, 70, frames, s);
  auto total = [&](int64_t cap) {
    StreamOptions c = s;
    c.max_special_frames = cap;
    return estimate_memory(kTiny, DType::F32, 56, 70, frames, c).total;
  };
  const int64_t evicted = frames - 4 - 6;
  for (int64_t cap = 1; cap + 1 < evicted; ++cap) ASSERT_LE(total(cap), total(cap + 1)) << cap;
  for (const size_t available : {total(1), total(200), total(256), total(257), total(900),
                                 total(1000) + 12345, total(evicted - 1)}) {
    int64_t linear = -1;
    for (int64_t cap = 1; cap < evicted; ++cap)
      if (total(cap) <= available) linear = cap;
    if (m.total <= available) continue;
    const MilderSettings line =
        milder_settings(kTiny, DType::F32, 56, 70, frames, s, nullptr, available);
    EXPECT_EQ(suggested_cap(line), linear);
  }
}

// The keyframe interval is found by bisection, which relies on the estimate never growing as
// the interval grows; a linear scan over every interval of smaller runs finds the same first fit.
TEST(Preflight, KeyframeIntervalBisectionAgreesWithALinearScan) {
  struct Case {
    StreamOptions s;
    int64_t frames;
  };
  const std::vector<Case> cases = {
      {{.scale_frames = 4, .window = 6, .keyframe_interval = 1}, 1500},
      {{.scale_frames = 4, .window = 6, .keyframe_interval = 3}, 1500},
      {{.scale_frames = 2, .window = 3, .keyframe_interval = 1, .max_special_frames = 100}, 1200},
      {{.scale_frames = 8, .window = 16, .keyframe_interval = 1}, 400},
      {{.scale_frames = 4, .window = 6, .keyframe_interval = 1, .cross_frame_special = false}, 900},
  };
  for (const Case& c : cases) {
    auto total = [&](int64_t interval) {
      StreamOptions k = c.s;
      k.keyframe_interval = static_cast<int>(interval);
      return estimate_memory(kTiny, DType::F32, 56, 70, c.frames, k).total;
    };
    const int64_t from = c.s.keyframe_interval + 1, to = c.frames - c.s.scale_frames;
    for (const size_t available :
         {total(from - 1) - 1, total(from), total(from + 1), total(7) + 1, total(50), total(51) - 1,
          total(to / 2), total(to), total(to) - 1, size_t{1000}}) {
      std::optional<int> linear;
      for (int64_t v = from; v <= to && !linear; ++v)
        if (total(v) <= available) linear = static_cast<int>(v);
      const MilderSettings m =
          milder_settings(kTiny, DType::F32, 56, 70, c.frames, c.s, nullptr, available);
      EXPECT_EQ(m.keyframe_interval, linear) << c.frames << " frames, " << available << " bytes";
    }
  }
}

// A refusal of a very long run names its milder settings at once: bisections, not scans over the
// run's length (which took minutes for ten million frames).
TEST(Preflight, MilderSettingsOfTenMillionFramesTakeWellUnderASecond) {
  const StreamOptions s;
  const int64_t frames = 10'000'000;
  const MemoryEstimate m = estimate_memory(kReleased, DType::BF16, 378, 504, frames, s);
  StreamOptions sparse = s;
  sparse.keyframe_interval = 5000;
  const size_t fits_sparse =
      estimate_memory(kReleased, DType::BF16, 378, 504, frames, sparse).total;
  for (const size_t available : {fits_sparse, m.weights}) {
    const auto t0 = std::chrono::steady_clock::now();
    const MilderSettings milder =
        milder_settings(kReleased, DType::BF16, 378, 504, frames, s, nullptr, available);
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_LT(seconds, 0.5) << available;
    if (available == m.weights) {
      EXPECT_FALSE(milder.keyframe_interval);  // nothing leaves room for the caches
      continue;
    }
    // The interval found fits, the one before does not.
    ASSERT_TRUE(milder.keyframe_interval);
    StreamOptions fit = s, over = s;
    fit.keyframe_interval = *milder.keyframe_interval;
    over.keyframe_interval = *milder.keyframe_interval - 1;
    EXPECT_GT(*milder.keyframe_interval, 1000);
    EXPECT_LE(*milder.keyframe_interval, 5000);
    EXPECT_LE(estimate_memory(kReleased, DType::BF16, 378, 504, frames, fit).total, available);
    EXPECT_GT(estimate_memory(kReleased, DType::BF16, 378, 504, frames, over).total, available);
  }
}

TEST(Preflight, UnboundedGrowthWhenTheGrowingCachesDominate) {
  const StreamOptions s;
  const MemoryEstimate longer = estimate_memory(kReleased, DType::BF16, 378, 504, 100000, s);
  EXPECT_GT(2 * (longer.special_stream + longer.camera_cache), longer.total);
  EXPECT_EQ(unbounded_growth(longer, s), longer.special_stream + longer.camera_cache);
  // 300 frames: the pool, weights and activations dominate.
  EXPECT_EQ(unbounded_growth(estimate_memory(kReleased, DType::BF16, 378, 504, 300, s), s), 0u);
  // A capped run does not grow.
  StreamOptions capped = s;
  capped.max_special_frames = 1000;
  EXPECT_EQ(
      unbounded_growth(estimate_memory(kReleased, DType::BF16, 378, 504, 100000, capped), capped),
      0u);
}

TEST(Preflight, SpecialStreamIsTheKVCacheBeyondThePagePool) {
  const StreamOptions s{.scale_frames = 4, .window = 6, .keyframe_interval = 1};
  EXPECT_EQ(estimate_memory(kTiny, DType::F32, 56, 70, 10, s).special_stream, 0u);
  const MemoryEstimate m = estimate_memory(kTiny, DType::F32, 56, 70, 300, s);
  const KVCacheConfig c = kv_cache_config(kTiny, 56, 70, s);
  EXPECT_EQ(m.kv_cache - m.special_stream, PagedKVCache::bytes_for(c, 0));
  // 290 evicted frames: two chunks of 256 frames' specials, every global layer, K and V.
  EXPECT_EQ(m.special_stream, static_cast<size_t>(2 * 256 * 6 * kTiny.heads * kTiny.head_dim() * 4 *
                                                  2 * kTiny.depth));
}

// --- Windowed mode sizes its pool by the window ---------------------------------------------

// Records the options sessions are started with and the most KV bytes one reserved.
class RecordingEngine final : public Engine {
 public:
  explicit RecordingEngine(Engine& inner) : inner_(inner) {}
  ModelInfo info() const override { return inner_.info(); }
  size_t device_memory_used() const override { return inner_.device_memory_used(); }
  size_t device_memory_free() const override { return inner_.device_memory_free(); }
  std::unique_ptr<Session> start(const StreamOptions& options) override {
    started.push_back(options);
    return std::make_unique<Recording>(inner_.start(options), *this);
  }
  std::vector<StreamOptions> started;
  size_t kv_reserved = 0, camera_reserved = 0;  // the largest seen, all layers / slots

 private:
  class Recording final : public Session {
   public:
    Recording(std::unique_ptr<Session> s, RecordingEngine& e) : s_(std::move(s)), e_(e) {}
    void push(const Tensor& image, const Callback& cb) override { s_->push(image, cb); }
    void finish(const Callback& cb) override {
      s_->finish(cb);
      const CacheStats c = s_->cache_stats();
      e_.kv_reserved = std::max(e_.kv_reserved, c.bytes_reserved * static_cast<size_t>(c.layers));
      e_.camera_reserved = std::max(e_.camera_reserved, c.camera_cache_bytes_reserved);
    }
    void flush(const Callback& cb) override { s_->flush(cb); }
    void reset() override { s_->reset(); }
    CacheStats cache_stats() const override { return s_->cache_stats(); }

   private:
    std::unique_ptr<Session> s_;
    RecordingEngine& e_;
  };
  Engine& inner_;
};

TEST(Preflight, WindowedRunReservesOnlyThePagesAWindowFills) {
  // Windows of 4 scale frames + 4 keyframes, under a sliding window of 64: before, every window
  // reserved 4 + 64 + 1 pages per layer and filled 8.
  const WindowedOptions o{
      .window_size = 8, .overlap = 2, .stream = {.scale_frames = 4, .window = 64}};
  const StreamOptions s = per_window_stream(o);
  EXPECT_EQ(s.window, 4);
  EXPECT_EQ(PagedKVCache::pool_pages(kv_cache_config(kTiny, 56, 70, s)), 9);
  const MemoryEstimate m = estimate_windowed_memory(kTiny, DType::F32, 56, 70, 20, o);
  EXPECT_EQ(m.kv_cache, PagedKVCache::bytes_for(kv_cache_config(kTiny, 56, 70, s), 8));
  // A sliding window longer than the window's keyframes changes nothing.
  WindowedOptions longer = o;
  longer.stream.window = 1000;
  EXPECT_EQ(estimate_windowed_memory(kTiny, DType::F32, 56, 70, 20, longer).total, m.total);
  // A shorter one still sizes the pool (and evicts into the special stream).
  WindowedOptions shorter = o;
  shorter.stream.window = 2;
  EXPECT_EQ(per_window_stream(shorter).window, 2);
  EXPECT_EQ(PagedKVCache::pool_pages(kv_cache_config(kTiny, 56, 70, per_window_stream(shorter))),
            7);

  // What run_windowed really starts and reserves.
  auto tiny = Engine::create({.model = "synthetic:1", .arch = "tiny"});
  RecordingEngine engine(*tiny);
  Tensor image = Tensor::zeros({3, 56, 70});
  for (int64_t i = 0; i < image.numel(); ++i) image.f32()[i] = static_cast<float>(i % 89) / 89.f;
  const WindowedResult r = run_windowed(
      engine, 20, [&](int64_t) { return image; }, o);
  EXPECT_EQ(r.windows.size(), 3u);
  ASSERT_EQ(engine.started.size(), 1u);  // one session, reset between windows
  EXPECT_EQ(engine.started[0].window, 4);
  EXPECT_EQ(engine.kv_reserved, m.kv_cache);
  EXPECT_EQ(engine.camera_reserved, m.camera_cache);
}

// Windows run with the whole of WindowedOptions::stream: the special-token settings reach each
// window's session (an earlier copy of seven fields dropped them), and the estimate of a window
// is what that session reserves.
TEST(Preflight, WindowedRunPassesEveryStreamSettingToItsWindows) {
  WindowedOptions o{.window_size = 12, .overlap = 2};
  o.stream = {.scale_frames = 2,
              .window = 3,
              .keyframe_interval = 1,
              .camera_iterations = 2,
              .cross_frame_special = false,
              .camera_only = true,
              .include_scale_frames = false,
              .max_special_frames = 5};
  auto tiny = Engine::create({.model = "synthetic:1", .arch = "tiny"});
  RecordingEngine engine(*tiny);
  Tensor image = Tensor::zeros({3, 56, 70});
  for (int64_t i = 0; i < image.numel(); ++i) image.f32()[i] = static_cast<float>(i % 83) / 83.f;
  const WindowedResult r = run_windowed(
      engine, 16, [&](int64_t) { return image; }, o);
  EXPECT_EQ(r.windows.size(), 2u);
  ASSERT_EQ(engine.started.size(), 1u);
  const StreamOptions& s = engine.started[0];
  EXPECT_FALSE(s.cross_frame_special);
  EXPECT_TRUE(s.camera_only);
  EXPECT_FALSE(s.include_scale_frames);
  EXPECT_EQ(s.scale_frames, 2);
  EXPECT_EQ(s.window, 3);
  EXPECT_EQ(s.camera_iterations, 2);
  EXPECT_EQ(s.max_special_frames, 5);
  const MemoryEstimate m = estimate_windowed_memory(kTiny, DType::F32, 56, 70, 16, o);
  EXPECT_EQ(engine.kv_reserved, m.kv_cache);
  EXPECT_EQ(engine.camera_reserved, m.camera_cache);
}

TEST(Preflight, WindowedShortfallScansOnlySlidingWindowsThatShrinkThePool) {
  const WindowedOptions o{
      .window_size = 24, .overlap = 4, .stream = {.scale_frames = 8, .window = 64}};
  const MemoryEstimate m = estimate_windowed_memory(kReleased, DType::BF16, 378, 504, 500, o);
  const size_t available = m.total - 50'000'000;
  const MilderSettings line =
      milder_windowed_settings(kReleased, DType::BF16, 378, 504, 500, o, nullptr, available);
  ASSERT_TRUE(line.window);
  const int window = *line.window;
  EXPECT_LT(window, 16);  // below the 16 keyframes a window holds
  WindowedOptions fit = o;
  fit.stream.window = window;
  EXPECT_LE(estimate_windowed_memory(kReleased, DType::BF16, 378, 504, 500, fit).total, available);
}

TEST(Preflight, WindowedShortfallNamesASpecialFrameCapWhenWindowsEvict) {
  // 600-frame windows through a sliding window of 16 evict 576 frames' specials each.
  const WindowedOptions o{
      .window_size = 600, .overlap = 16, .stream = {.scale_frames = 8, .window = 16}};
  const MemoryEstimate m = estimate_windowed_memory(kReleased, DType::BF16, 378, 504, 5000, o);
  WindowedOptions capped = o;
  capped.stream.max_special_frames = 100;
  const size_t available =
      estimate_windowed_memory(kReleased, DType::BF16, 378, 504, 5000, capped).total;
  ASSERT_LT(available, m.total);
  const MilderSettings line =
      milder_windowed_settings(kReleased, DType::BF16, 378, 504, 5000, o, nullptr, available);
  const int64_t cap = suggested_cap(line);
  ASSERT_GE(cap, 100);
  EXPECT_LT(cap, 576);
  WindowedOptions fit = o, over = o;
  fit.stream.max_special_frames = cap;
  over.stream.max_special_frames = cap + 1;
  EXPECT_LE(estimate_windowed_memory(kReleased, DType::BF16, 378, 504, 5000, fit).total, available);
  EXPECT_GT(estimate_windowed_memory(kReleased, DType::BF16, 378, 504, 5000, over).total,
            available);
}

// --- Results kept on the host ---------------------------------------------------------------

TEST(Preflight, ResultsCountWhatTheOutputsKeepPerFrame) {
  const int64_t h = 56, w = 70, plane = h * w * 4;
  const ResultOutputs plain;
  // Per frame: pose_enc, c2w, w2c, intrinsics, a timestamp (the maps go to disk).
  const size_t per_frame = 42 * 4 + 8;
  EXPECT_EQ(
      estimate_result_memory(plain, h, w, 200, 4) - estimate_result_memory(plain, h, w, 100, 4),
      100 * per_frame);
  // What does not grow: two result slots of a phase-1 call (input, depth, confidence), the
  // phase-1 frames and their batch, two frames waiting for their results.
  EXPECT_EQ(estimate_result_memory(plain, h, w, 100, 4) - 100 * per_frame,
            static_cast<size_t>(2 * 4 * 5 * plane + 2 * 4 * 3 * plane + 2 * 3 * plane));
  // An API that returns every frame's maps keeps them: 2 maps a frame for depth and confidence.
  ResultOutputs kept;
  kept.kept_maps = 2;
  EXPECT_EQ(
      estimate_result_memory(kept, h, w, 100, 4) - estimate_result_memory(plain, h, w, 100, 4),
      static_cast<size_t>(100 * 2 * plane));
  // The GLB export keeps every point of the stride grid: 14 x 18 at stride 4, 16 bytes each.
  ResultOutputs glb;
  glb.glb = true;
  EXPECT_EQ(estimate_result_memory(glb, h, w, 100, 4) - estimate_result_memory(plain, h, w, 100, 4),
            static_cast<size_t>(100 * (14 * 18 * 16 + 80)));
  glb.point_stride = 1;
  EXPECT_EQ(estimate_result_memory(glb, h, w, 100, 4) - estimate_result_memory(plain, h, w, 100, 4),
            static_cast<size_t>(100 * (56 * 70 * 16 + 80)));
  // Windowed: the two windows being aligned, and the frames the reader keeps for the overlaps.
  ResultOutputs windowed;
  windowed.windowed = true;
  windowed.recent_frames = 9;
  EXPECT_EQ(estimate_result_memory(windowed, h, w, 100, 4, 30) -
                estimate_result_memory(plain, h, w, 100, 4),
            static_cast<size_t>(2 * 30 * 2 * plane + 2 * 100 + 8 * 3 * plane));
}

TEST(Preflight, ResultsCountInTheTotalOnlyOnTheHost) {
  const StreamOptions s;
  const MemoryEstimate model = estimate_memory(kReleased, DType::BF16, 378, 504, 10000, s);
  EXPECT_EQ(model.results, 0u);  // not asked for
  ResultOutputs cpu, gpu;
  gpu.on_host = false;
  const MemoryEstimate on_cpu = estimate_memory(kReleased, DType::BF16, 378, 504, 10000, s, &cpu);
  const MemoryEstimate on_gpu = estimate_memory(kReleased, DType::BF16, 378, 504, 10000, s, &gpu);
  // 10,000 frames of 378x504: their cameras and timestamps (1.76 MB) and what the session holds
  // whatever the length (102 MB); their depth and confidence maps (15.2 GB) go to disk.
  EXPECT_NEAR(on_cpu.results / 1e6, 103.9, 0.1);
  EXPECT_EQ(on_cpu.total, model.total + on_cpu.results);
  EXPECT_EQ(on_gpu.results, on_cpu.results);
  EXPECT_EQ(on_gpu.total, model.total);
  // Named in the breakdown.
  // Windowed results cover the whole sequence, not one window.
  const WindowedOptions o{.window_size = 64, .overlap = 16, .stream = {.scale_frames = 8}};
  const MemoryEstimate wa =
      estimate_windowed_memory(kReleased, DType::BF16, 378, 504, 200, o, &cpu);
  const MemoryEstimate wb =
      estimate_windowed_memory(kReleased, DType::BF16, 378, 504, 10000, o, &cpu);
  EXPECT_GT(wb.results, on_cpu.results);  // + the two windows being aligned
  EXPECT_EQ(wb.total - wb.results, wa.total - wa.results);
}

TEST(Preflight, ShortfallSuggestionsFitWithTheResults) {
  const StreamOptions s;
  const ResultOutputs cpu;
  const MemoryEstimate m = estimate_memory(kReleased, DType::F32, 378, 504, 2000, s, &cpu);
  const size_t available = m.total - 2'000'000'000;
  const MilderSettings line =
      milder_settings(kReleased, DType::F32, 378, 504, 2000, s, &cpu, available);
  const int64_t cap = suggested_cap(line);
  ASSERT_GT(cap, 0);
  StreamOptions fit = s;
  fit.max_special_frames = cap;
  EXPECT_LE(estimate_memory(kReleased, DType::F32, 378, 504, 2000, fit, &cpu).total, available);
  // Where the results alone are more than there is, no cache setting helps.
  const MemoryEstimate huge = estimate_memory(kReleased, DType::F32, 378, 504, 100000, s, &cpu);
  const MilderSettings none =
      milder_settings(kReleased, DType::F32, 378, 504, 100000, s, &cpu, huge.results);
  EXPECT_EQ(suggested_cap(none), -1);
  EXPECT_FALSE(none.window);
}

TEST(Preflight, ReadsHostMemory) {
  EXPECT_GT(host_memory_available(), 0u);
}

}  // namespace
}  // namespace lingbot
