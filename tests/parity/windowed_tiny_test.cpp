// Windowed mode: the schedule, the cross-window alignment on synthetic windows with a
// known answer, and the whole driver against the reference on the tiny fixture model.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "io/image.h"
#include "io/preprocess.h"
#include "lingbot/engine.h"
#include "lingbot/error.h"
#include "model/pose.h"
#include "stream/windowed.h"
#include "test_util.h"
#include "tiny_frames.h"
#include "weights/safetensors.h"

namespace lingbot {
namespace {

using Windows = std::vector<std::pair<int64_t, int64_t>>;

WindowedOptions opts(int window, int overlap, int overlap_kf, int scale, int k) {
  WindowedOptions o;
  o.window_size = window;
  o.overlap = overlap;
  o.overlap_keyframes = overlap_kf;
  o.stream.scale_frames = scale;
  o.stream.keyframe_interval = k;
  return o;
}

TEST(WindowedPlan, SpecWorkedExamples) {
  // demo.py defaults: window 64, overlap_size 16, k = 1 -> A 64, step 48.
  const auto demo = opts(64, 16, -1, 8, 1);
  EXPECT_EQ(resolve_overlap(200, demo), 16);
  EXPECT_EQ(plan_windows(200, demo), (Windows{{0, 64}, {48, 112}, {96, 160}, {144, 200}}));
  // README: window 128, overlap_keyframes 16, k = 2 -> A 248, O 32, one window for 200 frames.
  const auto readme = opts(128, -1, 16, 8, 2);
  EXPECT_EQ(resolve_overlap(200, readme), 32);
  EXPECT_EQ(plan_windows(200, readme), (Windows{{0, 200}}));
  EXPECT_EQ(plan_windows(500, readme), (Windows{{0, 248}, {216, 464}, {432, 500}}));
  // README long video: window 128, overlap_keyframes 8, k = 13 -> A 1568, O 104.
  const auto long_video = opts(128, -1, 8, 8, 13);
  EXPECT_EQ(resolve_overlap(200, long_video), 104);
  EXPECT_EQ(plan_windows(200, long_video), (Windows{{0, 200}}));
  EXPECT_EQ(plan_windows(3000, long_video), (Windows{{0, 1568}, {1464, 3000}}));
  // The tiny fixture: window 8, overlap 4, scale 4, k = 1.
  const auto tiny = opts(8, 4, -1, 4, 1);
  EXPECT_EQ(plan_windows(16, tiny), (Windows{{0, 8}, {4, 12}, {8, 16}}));
}

TEST(WindowedPlan, OverlapRulesAndEdgeCases) {
  EXPECT_EQ(resolve_overlap(200, opts(64, -1, -1, 8, 1)), 8);    // default: the scale frames
  EXPECT_EQ(resolve_overlap(200, opts(64, 16, 1, 8, 3)), 8);     // keyframes win, at least ws
  EXPECT_EQ(resolve_overlap(200, opts(64, 16, 0, 8, 3)), 8);     // 0 keyframes is "given"
  EXPECT_EQ(resolve_overlap(10, opts(64, 50, -1, 8, 1)), 9);     // at most S - 1
  EXPECT_EQ(resolve_overlap(5, opts(64, -1, -1, 8, 1)), 5 - 1);  // ws = S, clamped to S - 1
  EXPECT_EQ(resolve_overlap(1, opts(64, 16, -1, 8, 1)), 0);
  EXPECT_EQ(resolve_overlap(200, opts(64, 0, -1, 8, 1)), 0);
  EXPECT_TRUE(plan_windows(0, opts(64, 16, -1, 8, 1)).empty());
  EXPECT_EQ(plan_windows(1, opts(64, 16, -1, 8, 1)), (Windows{{0, 1}}));
  EXPECT_EQ(plan_windows(5, opts(2, 16, -1, 8, 1)), (Windows{{0, 5}}));  // S <= scale
  EXPECT_EQ(plan_windows(64, opts(64, 16, -1, 8, 1)), (Windows{{0, 64}}));
  EXPECT_EQ(plan_windows(65, opts(64, 16, -1, 8, 1)), (Windows{{0, 64}, {48, 65}}));
  // Window size below the scale count: scale-only windows; overlap >= window clamps the step.
  EXPECT_EQ(plan_windows(11, opts(4, 16, -1, 8, 1)), (Windows{{0, 8}, {1, 9}, {2, 10}, {3, 11}}));
  // Fixed interval: A = ws + (window - ws) k.
  EXPECT_EQ(plan_windows(30, opts(6, 4, -1, 4, 3)),
            (Windows{{0, 10}, {6, 16}, {12, 22}, {18, 28}, {24, 30}}));
}

// A window of `t` frames with random poses and depth, all keyframes unless `types` says otherwise.
WindowPrediction random_window(std::mt19937& rng, int64_t t, std::vector<uint8_t> types = {}) {
  std::uniform_real_distribution<float> u(-1, 1), d(0.5f, 5.0f);
  WindowPrediction w;
  w.height = 3;
  w.width = 5;
  for (int64_t i = 0; i < t; ++i) {
    std::array<float, 9> pe{u(rng), u(rng), u(rng), u(rng), u(rng), u(rng), u(rng), 0.9f, 1.1f};
    w.pose_enc.push_back(pe);
    for (int64_t p = 0; p < w.height * w.width; ++p) {
      w.depth.push_back(d(rng));
      w.conf.push_back(1 + d(rng));
    }
  }
  w.frame_type = types.empty() ? std::vector<uint8_t>(t, 1) : types;
  return w;
}

Sim3Rt known_sim3() {
  Sim3Rt tf;
  tf.s = 2.5;
  const double q[4] = {0.3, -0.5, 0.2, 0.7};  // x y z w, made unit below
  const double n = std::sqrt(q[0] * q[0] + q[1] * q[1] + q[2] * q[2] + q[3] * q[3]);
  float pe[9] = {0, 0, 0, 0, 0, 0, 0, 1, 1};
  for (int c = 0; c < 4; ++c) pe[3 + c] = static_cast<float>(q[c] / n);
  const CameraPose p = decode_pose(pe, 2, 2);
  for (int a = 0; a < 3; ++a)
    for (int b = 0; b < 3; ++b) tf.R[a][b] = p.c2w[a][b];
  tf.t = {0.7, -1.2, 3.4};
  return tf;
}

void expect_sim3_near(const Sim3Rt& got, const Sim3Rt& want, double tol) {
  EXPECT_NEAR(got.s, want.s, tol * want.s);
  for (int a = 0; a < 3; ++a) {
    EXPECT_NEAR(got.t[a], want.t[a], tol * 10) << "t" << a;
    for (int b = 0; b < 3; ++b) EXPECT_NEAR(got.R[a][b], want.R[a][b], tol) << "R" << a << b;
  }
}

// `previous` ends with the warped copy of current's first `overlap` frames.
WindowPrediction previous_for(std::mt19937& rng, const WindowPrediction& current, int64_t head,
                              int64_t overlap, const Sim3Rt& tf) {
  WindowPrediction prev = random_window(rng, head);
  WindowPrediction tail = current;
  warp_window(tail, tf);
  const int64_t plane = current.height * current.width;
  for (int64_t o = 0; o < overlap; ++o) {
    prev.pose_enc.push_back(tail.pose_enc[o]);
    prev.depth.insert(prev.depth.end(), tail.depth.begin() + o * plane,
                      tail.depth.begin() + (o + 1) * plane);
    prev.conf.insert(prev.conf.end(), tail.conf.begin() + o * plane,
                     tail.conf.begin() + (o + 1) * plane);
    prev.frame_type.push_back(1);
  }
  return prev;
}

TEST(WindowedAlign, RecoversAKnownSim3) {
  std::mt19937 rng(7);
  const WindowPrediction current = random_window(rng, 8);
  const Sim3Rt want = known_sim3();
  const WindowPrediction prev = previous_for(rng, current, 4, 6, want);
  expect_sim3_near(estimate_alignment(prev, current, 6), want, 1e-5);

  // Warping with the estimate puts the current window's overlap onto the previous one.
  WindowPrediction warped = current;
  warp_window(warped, estimate_alignment(prev, current, 6));
  for (int64_t o = 0; o < 6; ++o)
    for (int c = 0; c < 7; ++c) EXPECT_NEAR(warped.pose_enc[o][c], prev.pose_enc[4 + o][c], 1e-5);
  for (size_t i = 0; i < 6 * 15; ++i) EXPECT_NEAR(warped.depth[i], prev.depth[4 * 15 + i], 1e-5);
}

TEST(WindowedAlign, AnchorIsTheLastCommonKeyframeAndOnlyPairedFramesScale) {
  std::mt19937 rng(11);
  // Offsets 0..5: common keyframes at 0, 1 (scale frames of current) and 3.
  WindowPrediction current = random_window(rng, 8, {0, 0, 2, 1, 2, 1, 2, 1});
  const Sim3Rt want = known_sim3();
  WindowPrediction prev = previous_for(rng, current, 2, 6, want);
  prev.frame_type[2 + 5] = 2;  // offset 5 is a keyframe of current only
  // Everything the estimate must ignore is broken: unpaired depth and non-anchor poses.
  const int64_t plane = 15;
  for (int64_t o : {2, 4, 5})
    for (int64_t p = 0; p < plane; ++p) prev.depth[(2 + o) * plane + p] *= 7;
  for (int64_t o : {0, 1, 2, 4, 5}) prev.pose_enc[2 + o] = random_window(rng, 1).pose_enc[0];
  expect_sim3_near(estimate_alignment(prev, current, 6), want, 1e-5);

  // No common keyframe: the first overlap frame anchors and scales.
  current.frame_type.assign(8, 2);
  WindowPrediction prev0 = previous_for(rng, current, 2, 6, want);
  for (int64_t o = 1; o < 6; ++o) {
    prev0.pose_enc[2 + o] = random_window(rng, 1).pose_enc[0];
    for (int64_t p = 0; p < plane; ++p) prev0.depth[(2 + o) * plane + p] *= 3;
  }
  expect_sim3_near(estimate_alignment(prev0, current, 6), want, 1e-5);
}

TEST(WindowedAlign, ScaleIsTheLowerMedianOfValidRatiosClamped) {
  WindowPrediction c, p;
  c.height = p.height = 1;
  c.width = p.width = 7;
  c.pose_enc = p.pose_enc = {std::array<float, 9>{0, 0, 0, 0, 0, 0, 1, 1, 1}};
  c.frame_type = p.frame_type = {0};
  c.conf = p.conf = std::vector<float>(7, 1);
  // Valid ratios 4, 1, 3, 2 -> lower median 2; the zero, NaN and infinite pixels are skipped.
  c.depth = {1, 1, 1, 1, 0, NAN, 1};
  p.depth = {4, 1, 3, 2, 5, 5, INFINITY};
  EXPECT_EQ(estimate_alignment(p, c, 1).s, 2.0);
  p.depth = {1e5f, 1e5f, 1e5f, 1e5f, 1, 1, 1};
  EXPECT_NEAR(estimate_alignment(p, c, 1).s, 1e3, 1e-3);
  p.depth = {1e-9f, 1e-9f, 1e-9f, 1e-9f, 1, 1, 1};
  EXPECT_NEAR(estimate_alignment(p, c, 1).s, 1e-3, 1e-9);
  c.depth = {0, 0, 0, 0, 0, NAN, 0};  // nothing valid
  EXPECT_EQ(estimate_alignment(p, c, 1).s, 1.0);
  EXPECT_EQ(estimate_alignment(p, c, 0).s, 1.0);  // no overlap: identity
}

TEST(WindowedAlign, WarpCanonicalisesTheQuaternion) {
  WindowPrediction w;
  w.height = w.width = 1;
  const float n = std::sqrt(0.1f * 0.1f + 0.2f * 0.2f + 0.3f * 0.3f + 0.9f * 0.9f);
  w.pose_enc = {
      std::array<float, 9>{1, 2, 3, -0.1f * 2, -0.2f * 2, -0.3f * 2, -0.9f * 2, 0.5f, 0.6f}};
  w.depth = w.conf = {1};
  w.frame_type = {0};
  warp_window(w, Sim3Rt{});
  const float want[9] = {1, 2, 3, 0.1f / n, 0.2f / n, 0.3f / n, 0.9f / n, 0.5f, 0.6f};
  for (int c = 0; c < 9; ++c) EXPECT_NEAR(w.pose_enc[0][c], want[c], 1e-6) << c;
}

TEST(WindowedParity, TinyMatchesReference) {
  const auto want = read_safetensors(test::fixtures_dir() + "/tiny/windowed.safetensors").tensors;
  auto engine = Engine::create({.model = "synthetic:1", .arch = "tiny"});
  const auto frames = test::tiny_frames();
  ASSERT_EQ(frames.size(), 16u);
  WindowedOptions o = opts(8, 4, -1, 4, 1);
  o.stream.window = 6;  // the fixture model's cache window (no eviction at 4 keyframes anyway)
  std::vector<int64_t> fetched;
  std::vector<std::string> lines;
  const WindowedResult r = run_windowed(
      *engine, 16,
      [&](int64_t i) {
        fetched.push_back(i);
        return frames[i];
      },
      o, [&](const char* line) { lines.emplace_back(line); });
  EXPECT_EQ(fetched.size(), 24u);  // three windows of 8
  EXPECT_EQ(lines.size(), 3u);

  const double tol = 1e-4;
  const auto p = test::compare(r.pose_enc, want.at("pose_enc"));
  const auto d = test::compare(r.depth, want.at("depth"));
  const auto c = test::compare(r.depth_conf, want.at("depth_conf"));
  const auto s = test::compare(r.chunk_scales, want.at("chunk_scales"));
  const auto t = test::compare(r.chunk_transforms, want.at("chunk_transforms"));
  EXPECT_LE(p.relative(), tol) << "pose_enc";
  EXPECT_LE(d.relative(), tol) << "depth";
  EXPECT_LE(c.relative(), tol) << "depth_conf";
  EXPECT_LE(s.max_abs_err, tol) << "chunk_scales";
  EXPECT_LE(t.max_abs_err, tol) << "chunk_transforms";
  const Tensor ft = want.at("frame_type").to(DType::F32),
               kf = want.at("is_keyframe").to(DType::F32);
  ASSERT_EQ(r.frame_type.numel(), 16);
  for (int64_t i = 0; i < 16; ++i) {
    EXPECT_EQ(r.frame_type.data<uint8_t>()[i], ft.f32()[i]) << i;
    EXPECT_EQ(r.is_keyframe.data<bool>()[i], kf.f32()[i] != 0) << i;
  }
  // The per-frame cameras are the decoded stitched poses.
  const CameraPose cam = decode_pose(r.pose_enc.f32() + 9 * 9, 56, 70);
  for (int e = 0; e < 12; ++e) EXPECT_EQ(r.c2w.f32()[9 * 12 + e], (&cam.c2w[0][0])[e]);
  std::printf(
      "[ parity ] windowed: pose_enc %.2e, depth %.2e, depth_conf %.2e relative; chunk_scales "
      "%.2e, chunk_transforms %.2e absolute\n",
      p.relative(), d.relative(), c.relative(), s.max_abs_err, t.max_abs_err);
}

// One window is returned as streamed (no warp), so it is the plain streaming fixture.
TEST(WindowedDriver, ALoneWindowIsThePlainStream) {
  const auto want = read_safetensors(test::fixtures_dir() + "/tiny/stream_kf1.safetensors").tensors;
  auto engine = Engine::create({.model = "synthetic:1", .arch = "tiny"});
  const auto frames = test::tiny_frames();
  WindowedOptions o = opts(64, 4, -1, 4, 1);
  o.stream.window = 6;
  const WindowedResult r = run_windowed(
      *engine, 16, [&](int64_t i) { return frames[i]; }, o);
  ASSERT_EQ(r.windows, (Windows{{0, 16}}));
  EXPECT_LE(test::compare(r.pose_enc, want.at("pose_enc")).relative(), 1e-4);
  EXPECT_LE(test::compare(r.depth, want.at("depth")).relative(), 1e-4);
  ASSERT_EQ(r.chunk_scales.numel(), 1);
  EXPECT_EQ(r.chunk_scales.f32()[0], 1.0f);
}

// Keyframes are counted from each window's own scale block, and the stitched types follow.
TEST(WindowedDriver, FixedIntervalFrameTypes) {
  auto engine = Engine::create({.model = "synthetic:1", .arch = "tiny"});
  const auto frames = test::tiny_frames();
  const WindowedResult r = run_windowed(
      *engine, 16, [&](int64_t i) { return frames[i]; }, opts(6, 4, -1, 4, 2));
  ASSERT_EQ(r.windows, (Windows{{0, 8}, {4, 12}, {8, 16}}));
  const std::vector<uint8_t> want = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 2, 1, 2};
  ASSERT_EQ(r.frame_type.numel(), 16);
  for (int64_t i = 0; i < 16; ++i) {
    EXPECT_EQ(r.frame_type.data<uint8_t>()[i], want[i]) << i;
    EXPECT_EQ(r.is_keyframe.data<bool>()[i], want[i] != 2) << i;
  }
  for (int64_t j = 1; j < 3; ++j) {
    const float s = r.chunk_scales.f32()[j];
    EXPECT_TRUE(s >= 1e-3f && s <= 1e3f) << s;
    EXPECT_EQ(r.chunk_transforms.f32()[j * 16 + 15], 1.0f);
  }
}

TEST(WindowedDriver, RefusesAnOverlapAsLongAsTheWindow) {
  auto engine = Engine::create({.model = "synthetic:1", .arch = "tiny"});
  const auto frames = test::tiny_frames();
  EXPECT_THROW(run_windowed(
                   *engine, 16, [&](int64_t i) { return frames[i]; }, opts(4, 8, -1, 4, 1)),
               Error);
}

}  // namespace
}  // namespace lingbot
