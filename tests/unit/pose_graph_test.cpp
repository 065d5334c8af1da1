// The Sim(3) pose graph: closed-form cases, drift removal on a 600-keyframe two-lap loop with
// noisy and outlier loops (ATE by an Umeyama alignment written in loop_test_util.h), loops that
// are all outliers, the windowed graph, and bad input. Skipped where the build has no Ceres.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <ctime>

#include "lingbot/error.h"
#include "lingbot/loop.h"
#include "unit/loop_test_util.h"

namespace lingbot {
namespace {

using loop_test::ate;
using loop_test::positions;
using loop_test::rot_axis;

#define SKIP_WITHOUT_CERES() \
  if (!loop_closure_available()) GTEST_SKIP() << "built without Ceres"

void expect_pose_near(const Sim3& a, const Sim3& b, double tol, const std::string& what) {
  const auto ma = a.matrix(), mb = b.matrix();
  for (int i = 0; i < 16; ++i) EXPECT_NEAR(ma[i], mb[i], tol) << what << " element " << i;
}

PoseGraphOptions exact_options() {
  PoseGraphOptions o;
  o.gate = 0;
  o.outlier_threshold = 0;
  o.loss = RobustLoss::None;
  return o;
}

TEST(PoseGraph, ConsistentLoopLeavesThePosesWhereTheyAre) {
  SKIP_WITHOUT_CERES();
  PoseGraph g;  // default options: gate, robust loss and residual test on
  const Sim3 p0 = sim3_exp({0.1, 0.2, 0.3, 0.05, -0.1, 0.2, 0});
  const Sim3 p1 = p0 * sim3_exp({1, 0, 0.1, 0, 0.3, 0, 0});
  const Sim3 p2 = p1 * sim3_exp({1, 0.2, 0, 0.1, 0.2, 0, 0});
  g.add_node(0, p0);
  g.add_node(5, p1);
  g.add_node(9, p2);
  g.add_loop({0, 9, p0.inverse() * p2, 55});
  const PoseGraphSummary s = g.optimize();
  ASSERT_EQ(s.loops.size(), 1u);
  EXPECT_TRUE(s.loops[0].accepted);
  EXPECT_EQ(s.loops[0].score, 55);
  EXPECT_NEAR(s.loops[0].residual, 0, 1e-9);
  EXPECT_EQ(s.accepted, 1);
  EXPECT_LT(s.max_translation, 1e-9);
  expect_pose_near(g.estimate(0), p0, 1e-12, "node 0");
  expect_pose_near(g.estimate(5), p1, 1e-9, "node 5");
  expect_pose_near(g.estimate(9), p2, 1e-9, "node 9");
  const PoseCorrections c = g.corrections();
  for (const Sim3& x : c.corrections) expect_pose_near(x, Sim3{}, 1e-9, "correction");
}

TEST(PoseGraph, SquareWithYawDriftClosesIntoTheSquare) {
  SKIP_WITHOUT_CERES();
  // Four odometry steps of "1.2 forward, turn 93 degrees" and a loop saying the fifth node is
  // the first. By the ring's symmetry the optimum makes every step the same S with S^4 = I
  // nearest the measured step: 1.2 forward, exactly 90 degrees, scale 1. The loop is made much
  // stiffer than the odometry so that it holds to ~1e-6.
  PoseGraphOptions o = exact_options();
  o.loop_sigma_translation = o.loop_sigma_rotation = o.loop_sigma_scale = 1e-5;
  o.odometry_sigma_translation = o.odometry_sigma_rotation = o.odometry_sigma_scale = 0.1;
  PoseGraph g(o);
  Sim3 z = rot_axis(2, 93 * M_PI / 180);
  z.t = {1.2, 0, 0};
  Sim3 d = rot_axis(2, M_PI / 2);
  d.t = {1.2, 0, 0};
  Sim3 p, want;
  for (int k = 0; k <= 4; ++k) {
    g.add_node(k, p);
    p = p * z;
  }
  g.add_loop({0, 4, Sim3{}, 1});
  const PoseGraphSummary s = g.optimize();
  EXPECT_TRUE(s.loops[0].accepted);
  for (int k = 0; k <= 4; ++k) {
    expect_pose_near(g.estimate(k), want, 1e-5, "corner " + std::to_string(k));
    want = want * d;
  }
  // The corners by hand: (0,0), (1.2,0), (1.2,1.2), (0,1.2).
  EXPECT_NEAR(g.estimate(2).t[0], 1.2, 1e-5);
  EXPECT_NEAR(g.estimate(2).t[1], 1.2, 1e-5);
  EXPECT_NEAR(g.estimate(3).t[0], 0, 1e-5);
}

TEST(PoseGraph, SingleLoopRemovesConstantScaleDrift) {
  SKIP_WITHOUT_CERES();
  // A straight corridor walked out and back: 40 steps of 1 m, the stream's step growing by 1 %
  // each keyframe (scale drift) and a loop from the last keyframe to the first (the same place,
  // seen in the other direction). With odometry sigmas that admit this drift (2 % a keyframe)
  // the loop closes: the last keyframe comes back to the first and the error to under a fifth.
  const int n = 41;
  std::vector<Sim3> truth, streamed;
  double lambda = 1;
  for (int i = 0; i < n; ++i) {
    Sim3 t;
    const int leg = i <= 20 ? i : 40 - i;
    t.t = {static_cast<double>(leg), 0, 0};
    if (i > 20) t.q = rot_axis(1, M_PI).q;
    truth.push_back(t);
    if (i == 0) {
      streamed.push_back(t);
      continue;
    }
    Sim3 step = truth[i - 1].inverse() * t;
    for (double& v : step.t) v *= lambda;
    streamed.push_back(streamed.back() * step);
    lambda *= 1.01;
  }
  PoseGraphOptions o;
  o.odometry_sigma_scale = o.odometry_sigma_rotation = 0.02;
  PoseGraph g(o);
  for (int i = 0; i < n; ++i) g.add_node(i, streamed[i]);
  Sim3 z = truth[0].inverse() * truth[n - 1];
  z.s = 1 / lambda;  // lambda_0 / lambda_40
  g.add_loop({0, n - 1, z, 1});
  const double before = ate(positions(streamed), positions(truth));
  const PoseGraphSummary s = g.optimize();
  ASSERT_TRUE(s.loops[0].accepted) << s.loops[0].reason << " " << s.loops[0].residual;
  std::vector<Sim3> est;
  for (int i = 0; i < n; ++i) est.push_back(g.estimate(i));
  const double after = ate(positions(est), positions(truth));
  EXPECT_GT(before, 0.5);
  EXPECT_LT(after, 0.2 * before) << before << " -> " << after;
  // The last keyframe is back at the first.
  EXPECT_NEAR(est[n - 1].t[0], est[0].t[0], 0.05);
}

struct DriftCase {
  loop_test::Trajectory tr;
  std::vector<PoseEdge> loops;
  int outliers = 0;
};

DriftCase drift_case(int inlier_every, int n_outliers, uint32_t seed) {
  DriftCase c;
  c.tr = loop_test::make_trajectory(600, 2, 0.003, 0.0005, seed);
  std::mt19937 rng(seed + 1);
  const int lap = c.tr.per_lap;
  if (inlier_every > 0)
    for (int i = lap; i < 600; i += inlier_every) {
      std::uniform_int_distribution<int> off(-2, 2);
      c.loops.push_back(loop_test::true_loop(c.tr, i - lap + off(rng), i, rng, 0.005, 0.05, 0.01));
    }
  for (int k = 0; k < n_outliers; ++k) c.loops.push_back(loop_test::outlier_loop(c.tr, rng));
  c.outliers = n_outliers;
  std::shuffle(c.loops.begin(), c.loops.end(), rng);
  return c;
}

TEST(PoseGraph, DriftingTwoLapLoopWithOutliersComesBackToFifthOfItsError) {
  SKIP_WITHOUT_CERES();
  for (uint32_t seed : {1u, 2u}) {
    // 30 true loops (lap 2 to lap 1, every 10th keyframe) and 8 outliers: 21 %.
    const DriftCase c = drift_case(10, 8, seed);
    PoseGraph g;
    for (int i = 0; i < 600; ++i) g.add_node(i, c.tr.streamed[i]);
    for (const PoseEdge& l : c.loops) g.add_loop(l);
    // Wall and CPU time (CPU: the wall time counts other processes on a shared machine).
    const auto t0 = std::chrono::steady_clock::now();
    const std::clock_t c0 = std::clock();
    const PoseGraphSummary s = g.optimize();
    const double cpu_ms = 1000.0 * static_cast<double>(std::clock() - c0) / CLOCKS_PER_SEC;
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    std::vector<Sim3> est;
    for (int i = 0; i < 600; ++i) est.push_back(g.estimate(i));
    const double before = ate(positions(c.tr.streamed), positions(c.tr.truth));
    const double after = ate(positions(est), positions(c.tr.truth));
    int wrong = 0;  // outliers accepted or true loops rejected
    for (const LoopOutcome& o : s.loops) wrong += (o.score == 30) == o.accepted;
    std::printf(
        "seed %u: ATE %.3f -> %.3f m (x%.3f), %d accepted, %d rejected, %d misjudged, "
        "%d solves, %.0f ms (CPU %.0f ms)\n",
        seed, before, after, after / before, s.accepted, s.rejected, wrong, s.solves, ms, cpu_ms);
    EXPECT_GT(before, 2.0);  // the drift is real
    EXPECT_LE(after, 0.2 * before) << "seed " << seed;
    // Every outlier switched off, every true loop kept.
    for (const LoopOutcome& o : s.loops)
      EXPECT_EQ(o.accepted, o.score != 30) << "seed " << seed << ": " << o.from << " -> " << o.to
                                           << " residual " << o.residual << " " << o.reason;
    EXPECT_GT(s.max_translation, 1.0);
  }
}

TEST(PoseGraph, OnlyOutlierLoopsNeverMakeItWorse) {
  SKIP_WITHOUT_CERES();
  for (uint32_t seed : {4u, 5u}) {
    for (int count : {1, 4}) {
      const DriftCase c = drift_case(0, count, seed);
      PoseGraph g;
      for (int i = 0; i < 600; ++i) g.add_node(i, c.tr.streamed[i]);
      for (const PoseEdge& l : c.loops) g.add_loop(l);
      const PoseGraphSummary s = g.optimize();
      std::vector<Sim3> est;
      for (int i = 0; i < 600; ++i) est.push_back(g.estimate(i));
      const double before = ate(positions(c.tr.streamed), positions(c.tr.truth));
      const double after = ate(positions(est), positions(c.tr.truth));
      EXPECT_LE(after, before * (1 + 1e-9) + 1e-9)
          << "seed " << seed << ", " << count << " outliers, " << s.accepted << " accepted";
      EXPECT_EQ(s.accepted, 0) << "seed " << seed << ", " << count << " outliers";
    }
  }
}

TEST(PoseGraph, WindowsJoinedByTheirAlignmentsAreAllCorrectedByOneLoop) {
  SKIP_WITHOUT_CERES();
  // Eight windows of ten keyframes around a circle. Each window runs in its own frame and units
  // (frame V_u: its first keyframe's camera, scaled by nu_u); the alignments that stitch them
  // drift (5 % scale and 2 degrees of yaw a window). One loop from the last window's last
  // keyframe to the first window's first corrects every window.
  const int windows = 8, per = 10, n = windows * per;
  const loop_test::Trajectory tr = loop_test::make_trajectory(n, 1, 0, 0, 9);
  std::vector<Sim3> v(windows), w(windows);
  std::vector<std::vector<Sim3>> local(windows);  // keyframe poses in their window's frame
  for (int u = 0; u < windows; ++u) {
    v[u] = tr.truth[u * per];
    v[u].s = 1 / (1 + 0.3 * u);  // window u's units: 1 + 0.3 u per metre
    for (int k = 0; k < per; ++k) {
      // P = V^-1 G nu: SE(3) in window units.
      Sim3 p = v[u].inverse() * tr.truth[u * per + k];
      p.s = 1;
      local[u].push_back(p);
    }
  }
  // The keyframe that closes the loop: back at keyframe 0's place, seen from window 7.
  Sim3 closing = v[windows - 1].inverse() * tr.truth[0];
  closing.s = 1;
  Sim3 drift = rot_axis(1, 2 * M_PI / 180);
  drift.s = 1.05;
  w[0] = v[0];
  for (int u = 1; u < windows; ++u) w[u] = w[u - 1] * (v[u - 1].inverse() * v[u]) * drift;

  // A window's alignment is far less certain than one keyframe's odometry.
  PoseGraphOptions o;
  o.odometry_sigma_rotation = o.odometry_sigma_scale = 0.05;
  o.odometry_sigma_translation = 0.1;
  PoseGraph g(o);
  for (int u = 0; u < windows; ++u)
    if (u == 0) {
      g.add_node(u, w[u]);
    } else {
      g.add_node(u, w[u], w[u - 1].inverse() * w[u]);
    }
  // The loop measured between the two keyframes (in window 7's units at the closing keyframe):
  // the true T_a^-1 T_b with X = V P.
  const Sim3 z = (v[windows - 1] * closing).inverse() * (v[0] * local[0][0]);
  g.add_loop(window_loop_edge(windows - 1, closing, 0, local[0][0], z, 77));

  auto stitched = [&](auto window_pose) {
    std::vector<loop_test::V3> p;
    for (int u = 0; u < windows; ++u)
      for (int k = 0; k < per; ++k) p.push_back((window_pose(u) * local[u][k]).t);
    return p;
  };
  std::vector<loop_test::V3> truth;
  for (int i = 0; i < n; ++i) truth.push_back(tr.truth[i].t);
  const double before = ate(stitched([&](int u) { return w[u]; }), truth);
  const PoseGraphSummary s = g.optimize();
  ASSERT_TRUE(s.loops[0].accepted) << s.loops[0].reason << " " << s.loops[0].residual;
  const double after = ate(stitched([&](int u) { return g.estimate(u); }), truth);
  EXPECT_GT(before, 1.0);
  EXPECT_LT(after, 0.2 * before) << before << " -> " << after;
  // Window 0 holds the gauge; every other window moved.
  const PoseCorrections c = g.corrections();
  expect_pose_near(c.corrections[0], Sim3{}, 1e-12, "window 0");
  for (int u = 1; u < windows; ++u) {
    const auto m = c.corrections[u].matrix();
    EXPECT_GT(std::abs(m[3]) + std::abs(m[7]) + std::abs(std::log(c.corrections[u].s)), 1e-3)
        << "window " << u;
  }
}

TEST(PoseGraph, NonKeyframesFollowTheirKeyframeCorrection) {
  SKIP_WITHOUT_CERES();
  // Keyframes 0, 10, 20 on a line; a loop pulls 20 back. Frame 12 is attached to keyframe 10:
  // its corrected pose keeps its pose relative to keyframe 10.
  PoseGraph g(exact_options());
  Sim3 k0, k10, k20, f12;
  k10.t = {1, 0, 0};
  k20.t = {2, 0, 0};
  f12.t = {1.2, 0.1, 0};
  g.add_node(0, k0);
  g.add_node(10, k10);
  g.add_node(20, k20);
  Sim3 z;
  z.t = {1.8, 0, 0};
  g.add_loop({0, 20, z, 1});
  g.optimize();
  const PoseCorrections c = g.corrections();
  const Sim3 out = c.correct(12, f12);
  expect_pose_near(g.estimate(10).inverse() * out, k10.inverse() * f12, 1e-12, "relative");
  EXPECT_LT(g.estimate(20).t[0], 2.0);
}

TEST(PoseGraph, BadInputIsRejectedWithAMessage) {
  PoseGraph g;
  g.add_node(3, Sim3{});
  EXPECT_THROW(g.add_node(3, Sim3{}), Error);  // not increasing
  EXPECT_THROW(g.add_node(2, Sim3{}), Error);
  Sim3 bad;
  bad.s = -1;
  EXPECT_THROW(g.add_node(4, bad), Error);
  g.add_node(4, Sim3{});
  EXPECT_THROW(g.add_loop({3, 5, Sim3{}, 0}), Error);  // no node 5
  EXPECT_THROW(g.add_loop({3, 3, Sim3{}, 0}), Error);
  EXPECT_THROW(g.add_loop({3, 4, bad, 0}), Error);
  PoseGraphOptions o;
  o.loop_sigma_scale = 0;
  EXPECT_THROW(PoseGraph{o}, Error);
  try {
    g.add_loop({3, 9, Sim3{}, 0});
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("9"), std::string::npos) << e.what();
    EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument);
  }
  // Without loops optimize changes nothing (and needs no solver).
  const PoseGraphSummary s = g.optimize();
  EXPECT_EQ(s.solves, 0);
}

}  // namespace
}  // namespace lingbot
