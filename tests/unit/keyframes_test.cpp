// Flow-based keyframes (the reference): the reprojection measure on hand-built geometry and
// the decision rule on scripted magnitudes.
#include "stream/keyframes.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

namespace lingbot {
namespace {

constexpr std::array<float, 12> kIdentity = {1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0};

std::array<float, 9> pinhole(float f, int h, int w) {
  return {f, 0, w / 2.0f, 0, f, h / 2.0f, 0, 0, 1};
}

FrameResult plane(int h, int w, float depth, const std::array<float, 12>& c2w,
                  const std::array<float, 9>& K) {
  FrameResult r;
  r.height = h;
  r.width = w;
  r.c2w = c2w;
  r.intrinsics = K;
  r.depth.assign(static_cast<size_t>(h) * w, depth);
  return r;
}

TEST(FlowMagnitude, NoMotionIsZero) {
  // A non-trivial pose (90° about y, off the origin) to catch a transpose mix-up.
  const std::array<float, 12> c2w = {0, 0, 1, 2, 0, 1, 0, -1, -1, 0, 0, 0.5f};
  const auto K = pinhole(30, 40, 56);
  FrameResult r = plane(40, 56, 3, c2w, K);
  for (size_t i = 0; i < r.depth.size(); ++i)
    r.depth[i] = 1.0f + 0.01f * static_cast<float>(i % 97);
  EXPECT_NEAR(flow_magnitude(r, c2w, K), 0.0, 1e-9);
}

TEST(FlowMagnitude, SidewaysTranslationOfAFrontoParallelPlane) {
  // The current camera sits t to the right of the keyframe: every point of a plane at depth d
  // shifts by f t / d pixels, wherever it is.
  const float f = 50, d = 4, t = 0.2f;
  const auto K = pinhole(f, 56, 70);
  std::array<float, 12> c2w = kIdentity;
  c2w[3] = t;
  const FrameResult r = plane(56, 70, d, c2w, K);
  EXPECT_NEAR(flow_magnitude(r, kIdentity, K), f * t / d, 1e-5);
  // Motion is symmetric in direction.
  c2w[3] = -t;
  EXPECT_NEAR(flow_magnitude(plane(56, 70, d, c2w, K), kIdentity, K), f * t / d, 1e-5);
}

TEST(FlowMagnitude, SamplesOnlyTheStrideGrid) {
  const float f = 50, t = 0.2f;
  const auto K = pinhole(f, 20, 20);
  std::array<float, 12> c2w = kIdentity;
  c2w[3] = t;
  FrameResult r = plane(20, 20, 100, c2w, K);  // off-grid pixels: a far plane
  for (int v = 0; v < 20; v += 8)
    for (int u = 0; u < 20; u += 8) r.depth[v * 20 + u] = 2;  // grid pixels (0, 8, 16)
  EXPECT_NEAR(flow_magnitude(r, kIdentity, K), f * t / 2, 1e-5);
  // With stride 1 the far plane dominates the mean.
  EXPECT_LT(flow_magnitude(r, kIdentity, K, 1), f * t / 2 / 4);
}

TEST(FlowMagnitude, InvalidSamplesAreIgnored) {
  const float f = 50, t = 0.2f;
  const auto K = pinhole(f, 24, 24);
  std::array<float, 12> c2w = kIdentity;
  c2w[3] = t;
  FrameResult r = plane(24, 24, 4, c2w, K);
  // Zero, negative, tiny and NaN depths on some grid pixels do not count.
  r.depth[0] = 0;
  r.depth[8] = -3;
  r.depth[16] = 1e-7f;
  r.depth[8 * 24] = std::nanf("");
  EXPECT_NEAR(flow_magnitude(r, kIdentity, K), f * t / 4, 1e-5);
  // All invalid: 0.
  std::fill(r.depth.begin(), r.depth.end(), 0.0f);
  EXPECT_EQ(flow_magnitude(r, kIdentity, K), 0.0);
}

TEST(FlowMagnitude, InfiniteFocalLengthsAreIgnored) {
  // A zero field of view decodes to an infinite focal length (the tiny synthetic model does this).
  const float inf = std::numeric_limits<float>::infinity();
  std::array<float, 12> c2w = kIdentity;
  c2w[3] = 0.2f;
  const auto finite_K = pinhole(50, 16, 16);
  const auto inf_K = pinhole(inf, 16, 16);
  // The keyframe's: every projection is infinite.
  EXPECT_EQ(flow_magnitude(plane(16, 16, 4, c2w, finite_K), kIdentity, inf_K), 0.0);
  // The current frame's: pixels lift onto the optical axis, (0, 0, d), which projects to the
  // principal point (8, 8) shifted by f t / d = 2.5 px in u.
  double want = 0;
  for (int v : {0, 8})
    for (int u : {0, 8}) want += std::hypot(8 + 2.5 - u, 8.0 - v);
  EXPECT_NEAR(flow_magnitude(plane(16, 16, 4, c2w, inf_K), kIdentity, finite_K), want / 4, 1e-5);
}

TEST(FlowMagnitude, PointsBehindTheKeyframeAreIgnored) {
  // The keyframe camera sits 10 units ahead of a plane at depth 4, so every point lies behind it.
  const auto K = pinhole(50, 16, 16);
  std::array<float, 12> key = kIdentity;
  key[11] = 10;
  const FrameResult r = plane(16, 16, 4, kIdentity, K);
  EXPECT_EQ(flow_magnitude(r, key, K), 0.0);
  // Keyframe 2 ahead: rows v < 8 at depth 4 lie in front of it (z = 2), rows v >= 8 at depth 1
  // behind it (z = -1) and do not count.
  key[11] = 2;
  FrameResult half = plane(16, 16, 4, kIdentity, K);
  for (int i = 8 * 16; i < 16 * 16; ++i) half.depth[i] = 1;
  // Moving forward by 2 towards a plane at 4 scales offsets from the centre by 4 / 2 = 2, so each
  // valid sample moves by its own distance from the principal point (8, 8).
  double want = 0;
  for (int u : {0, 8}) want += std::hypot(u - 8.0, 0 - 8.0);
  EXPECT_NEAR(flow_magnitude(half, key, K), want / 2, 1e-5);
}

TEST(KeyframePolicy, ScriptedSequence) {
  const KeyframePolicy p{.threshold = 10, .max_gap = 3};
  // Scale frames 0..3: the last keyframe starts at 3, frame 4 is the first streamed frame.
  // Frame 6 crosses the threshold, 9 and 14 hit the gap, 11 crosses it again; 7 sits exactly on
  // it (not above).
  const std::vector<double> flow = {0, 2, 11, 10, 1, 1, 1, 50, 0, 0, 0};
  const std::vector<bool> want = {true,  false, true,  false, false, true,
                                  false, true,  false, false, true};
  int64_t last = 3;
  for (size_t i = 0; i < flow.size(); ++i) {
    const int64_t index = 4 + static_cast<int64_t>(i);
    const bool key = p.is_keyframe(i == 0, flow[i], index, last);
    EXPECT_EQ(key, want[i]) << "frame " << index;
    if (key) last = index;
  }
}

TEST(KeyframePolicy, FirstAndGapAreForcedRegardlessOfFlow) {
  const KeyframePolicy p{.threshold = 1e9, .max_gap = 3};
  EXPECT_TRUE(p.forced(true, 4, 3));
  EXPECT_TRUE(p.is_keyframe(true, 0, 4, 3));
  EXPECT_FALSE(p.forced(false, 6, 4));
  EXPECT_TRUE(p.forced(false, 7, 4));
  EXPECT_TRUE(p.is_keyframe(false, 0, 7, 4));
  // Strictly greater than the threshold.
  const KeyframePolicy q{.threshold = 5, .max_gap = 100};
  EXPECT_FALSE(q.is_keyframe(false, 5, 6, 4));
  EXPECT_TRUE(q.is_keyframe(false, 5.0001, 6, 4));
}

}  // namespace
}  // namespace lingbot
