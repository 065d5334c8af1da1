// Windowed mode with flow-based adaptive keyframes: windows close after their
// (window_size - scale)-th keyframe and the next starts `overlap` frames back, never before the
// end of the scale block. A scripted camera whose motion is known checks which frames become
// keyframes and that alignment recovers one trajectory; the tiny model checks the same driver
// against the reference where the flow schedule equals the fixed one.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <utility>
#include <vector>

#include "io/image.h"
#include "io/preprocess.h"
#include "lingbot/engine.h"
#include "model/pose.h"
#include "stream/keyframes.h"
#include "stream/windowed.h"
#include "test_util.h"
#include "tiny_frames.h"
#include "weights/safetensors.h"

namespace lingbot {
namespace {

using Windows = std::vector<std::pair<int64_t, int64_t>>;

constexpr int kSize = 28;
constexpr float kDepth = 2;
// A field of view giving a focal length of 20 px: one unit of sideways motion at depth 2 moves
// every pixel by 10 px.
const float kFov = 2 * std::atan(14.0f / 20.0f);

// The camera slides along x: still, then 0.1 per frame, then still again.
float scripted_x(int64_t g) {
  return g < 6 ? 0.0f : std::min<int64_t>(g - 5, 10) * 0.1f;
}

// A stand-in for the model: frame g (read from its pixels) is predicted in the frame of the
// sequence's first camera, at a scale of its own per sequence, as the real model predicts each
// window. The keyframe logic is StreamSession's: scale frames together, then one frame at a time.
class ScriptedSession final : public Session {
 public:
  explicit ScriptedSession(const StreamOptions& o)
      : opt_(o), keyframes_({.threshold = o.flow_threshold, .max_gap = o.max_non_keyframe_gap}) {}
  void push(const Tensor& image, const Callback& cb) override {
    const int64_t g = std::lround(image.f32()[0] * 1000);
    if (next_ == 0 && pending_.empty()) base_ = scripted_x(g);
    if (scale_ == 0) {
      pending_.push_back(g);
      if (static_cast<int>(pending_.size()) == opt_.scale_frames) finish(cb);
      return;
    }
    FrameResult r = result(g);
    r.keyframe = keyframes_.decide(r, r.index == scale_);
    cb(r);
  }
  void finish(const Callback& cb) override {
    if (pending_.empty()) return;
    scale_ = static_cast<int64_t>(pending_.size());
    for (int64_t g : pending_) {
      const FrameResult r = result(g);
      keyframes_.keep(r);
      cb(r);
    }
    pending_.clear();
  }
  void flush(const Callback&) override {}  // every result goes out within its push
  void reset() override {
    next_ = scale_ = 0;
    keyframes_.reset();
    ++sequence_;
  }
  CacheStats cache_stats() const override { return {}; }

 private:
  FrameResult result(int64_t g) {
    const float s = 1.0f + 0.5f * static_cast<float>(sequence_);
    FrameResult r;
    r.index = next_++;
    r.pose_enc = {(scripted_x(g) - base_) * s, 0, 0, 0, 0, 0, 1, kFov, kFov};
    const CameraPose p = decode_pose(r.pose_enc.data(), kSize, kSize);
    std::copy(&p.c2w[0][0], &p.c2w[0][0] + 12, r.c2w.begin());
    std::copy(&p.w2c[0][0], &p.w2c[0][0] + 12, r.w2c.begin());
    std::copy(&p.K[0][0], &p.K[0][0] + 9, r.intrinsics.begin());
    r.height = r.width = kSize;
    r.depth.assign(kSize * kSize, kDepth * s);
    r.confidence.assign(kSize * kSize, 1);
    return r;
  }
  StreamOptions opt_;
  AdaptiveKeyframes keyframes_;
  std::vector<int64_t> pending_;
  int64_t next_ = 0, scale_ = 0, sequence_ = 0;
  float base_ = 0;
};

// Frame g of the scripted video: its number in its pixels.
Tensor scripted_frame(int64_t g) {
  Tensor t = Tensor::zeros({3, kSize, kSize});
  for (int64_t i = 0; i < t.numel(); ++i) t.f32()[i] = static_cast<float>(g) / 1000;
  return t;
}

class ScriptedEngine final : public Engine {
 public:
  ModelInfo info() const override { return {}; }
  size_t device_memory_used() const override { return 0; }
  size_t device_memory_free() const override { return 0; }
  std::unique_ptr<Session> start(const StreamOptions& o) override {
    return std::make_unique<ScriptedSession>(o);
  }
};

TEST(WindowedFlow, ScriptedMotionPicksKeyframesAndAlignsWindows) {
  WindowedOptions o;
  o.stream.scale_frames = 2;
  o.window_size = 5;  // 3 keyframes per window
  o.overlap = 3;
  o.stream.flow_threshold = 2.5f;  // 0.25 units of motion
  o.stream.max_non_keyframe_gap = 4;
  ScriptedEngine engine;
  int64_t fetched = 0;
  const WindowedResult r = run_windowed(
      engine, 20,
      [&](int64_t g) {
        ++fetched;
        return scripted_frame(g);
      },
      o);
  // Window 1: frame 2 (first streamed), 6 (gap of 4 while still), 9 (0.3 units since 6).
  // Window 2 starts 3 back at 7: 9 (first), 12, 15 (0.3 units each). Window 3 starts at 13:
  // 15 (first), then the camera stops and the gap forces 19.
  EXPECT_EQ(r.windows, (Windows{{0, 10}, {7, 16}, {13, 20}}));
  EXPECT_EQ(fetched, 10 + 9 + 7);
  const std::vector<uint8_t> types = {0, 0, 1, 2, 2, 2, 1, 0, 0, 1, 2, 2, 1, 0, 0, 1, 2, 2, 2, 1};
  ASSERT_EQ(r.frame_type.numel(), 20);
  for (int64_t g = 0; g < 20; ++g) {
    EXPECT_EQ(r.frame_type.data<uint8_t>()[g], types[g]) << g;
    EXPECT_EQ(r.is_keyframe.data<bool>()[g], types[g] != 2) << g;
    // Each window had its own origin and scale; aligned, they give back one trajectory.
    EXPECT_NEAR(r.pose_enc.f32()[g * 9], scripted_x(g), 1e-5) << g;
    EXPECT_NEAR(r.depth.f32()[g * kSize * kSize], kDepth, 1e-5) << g;
  }
  EXPECT_NEAR(r.chunk_scales.f32()[1], 1 / 1.5, 1e-6);
  EXPECT_NEAR(r.chunk_scales.f32()[2], 1 / 2.0, 1e-6);
}

// A window size within the scale block leaves no keyframe slots: every window is its scale
// block and the next starts right after it, so nothing overlaps and no frame is lost (the
// reference would still drop `overlap` frames per window when stitching).
TEST(WindowedFlow, ScaleOnlyWindowsDoNotOverlap) {
  WindowedOptions o;
  o.stream.scale_frames = 4;
  o.window_size = 3;
  o.overlap = 2;
  o.stream.flow_threshold = 1;
  ScriptedEngine engine;
  const WindowedResult r = run_windowed(engine, 10, scripted_frame, o);
  EXPECT_EQ(r.windows, (Windows{{0, 4}, {4, 8}, {8, 10}}));
  for (int64_t g = 0; g < 10; ++g) EXPECT_EQ(r.frame_type.data<uint8_t>()[g], 0) << g;
}

WindowedOptions tiny_options(int window, int overlap, float threshold, int gap) {
  WindowedOptions o;
  o.window_size = window;
  o.overlap = overlap;
  o.stream.scale_frames = 4;
  o.stream.window = 6;
  o.stream.flow_threshold = threshold;
  o.stream.max_non_keyframe_gap = gap;
  return o;
}

// The synthetic model's cameras have a zero field of view, so its flow is 0 and only the gap
// makes keyframes. A gap of 1 keeps every frame: the windows of the fixed schedule, at most 4
// keyframes per window (below the cache window of 6, so deferred eviction changes nothing),
// hence the reference's windowed fixture.
TEST(WindowedFlow, EveryFrameAKeyframeIsTheFixedReference) {
  const auto want = read_safetensors(test::fixtures_dir() + "/tiny/windowed.safetensors").tensors;
  auto engine = Engine::create({.model = "synthetic:1", .arch = "tiny"});
  const auto frames = test::tiny_frames();
  const WindowedResult r = run_windowed(
      *engine, 16, [&](int64_t i) { return frames[i]; }, tiny_options(8, 4, 1e-9f, 1));
  EXPECT_EQ(r.windows, (Windows{{0, 8}, {4, 12}, {8, 16}}));
  const auto p = test::compare(r.pose_enc, want.at("pose_enc"));
  const auto d = test::compare(r.depth, want.at("depth"));
  EXPECT_LE(p.relative(), 1e-4) << "pose_enc";
  EXPECT_LE(d.relative(), 1e-4) << "depth";
  EXPECT_LE(test::compare(r.chunk_scales, want.at("chunk_scales")).max_abs_err, 1e-4);
  const Tensor ft = want.at("frame_type").to(DType::F32);
  for (int64_t i = 0; i < 16; ++i) EXPECT_EQ(r.frame_type.data<uint8_t>()[i], ft.f32()[i]) << i;
  std::printf("[ parity ] windowed flow, every frame a keyframe: pose_enc %.2e, depth %.2e\n",
              p.relative(), d.relative());
}

// A gap of 2 with a threshold nothing reaches: keyframes at local frames 4 and 6, so windows of
// 7 frames starting 2 back.
TEST(WindowedFlow, GapDrivenWindowsOnTheTinyModel) {
  auto engine = Engine::create({.model = "synthetic:1", .arch = "tiny"});
  const auto frames = test::tiny_frames();
  const WindowedResult r = run_windowed(
      *engine, 16, [&](int64_t i) { return frames[i]; }, tiny_options(6, 2, 1e9f, 2));
  EXPECT_EQ(r.windows, (Windows{{0, 7}, {5, 12}, {10, 16}}));
  const std::vector<uint8_t> types = {0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 2};
  for (int64_t i = 0; i < 16; ++i) {
    EXPECT_EQ(r.frame_type.data<uint8_t>()[i], types[i]) << i;
    EXPECT_TRUE(std::isfinite(r.pose_enc.f32()[i * 9])) << i;
  }
}

}  // namespace
}  // namespace lingbot
