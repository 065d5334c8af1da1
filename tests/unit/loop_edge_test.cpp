// The loop edge from a pair's geometry (loop_edge_from_pair) on synthetic views with a known
// answer: points seen by two cameras of a known relative pose, the stream's depths in each
// frame's own units, the pair block's poses in a world and units of its own. The expected edge
// comes from the definition (it maps the query's camera points in the query's stream units onto
// the match's in the match's units), and the expected epipolar error from a geometric
// construction (the projection of two points of each ray), not from the code's formulas.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <random>
#include <vector>

#include "lingbot/loop.h"
#include "loop_test_util.h"

namespace lingbot {
namespace {

using loop_test::M3;
using loop_test::V3;

constexpr double kDeg = M_PI / 180;

V3 mul(const M3& a, const V3& v) {
  return {a[0] * v[0] + a[1] * v[1] + a[2] * v[2], a[3] * v[0] + a[4] * v[1] + a[5] * v[2],
          a[6] * v[0] + a[7] * v[1] + a[8] * v[2]};
}
V3 sub(const V3& a, const V3& b) {
  return {a[0] - b[0], a[1] - b[1], a[2] - b[2]};
}
V3 add(const V3& a, const V3& b) {
  return {a[0] + b[0], a[1] + b[1], a[2] + b[2]};
}
V3 scaled(const V3& a, double s) {
  return {s * a[0], s * a[1], s * a[2]};
}

// A camera: c2w rotation and centre in some world.
struct Camera {
  M3 r;
  V3 c;
  V3 to_camera(const V3& x) const { return mul(loop_test::transpose(r), sub(x, c)); }
  V3 to_world(const V3& p) const { return add(mul(r, p), c); }
  std::array<float, 12> c2w() const {
    return {float(r[0]), float(r[1]), float(r[2]), float(c[0]), float(r[3]), float(r[4]),
            float(r[5]), float(c[1]), float(r[6]), float(r[7]), float(r[8]), float(c[2])};
  }
};

struct K {
  double fx, fy, cx, cy;
  std::array<float, 9> matrix() const {
    return {float(fx), 0, float(cx), 0, float(fy), float(cy), 0, 0, 1};
  }
  std::array<double, 2> project(const V3& p) const {
    return {fx * p[0] / p[2] + cx, fy * p[1] / p[2] + cy};
  }
};

M3 rotation(double yaw, double pitch, double roll) {
  return Sim3(loop_test::rot_axis(1, yaw) * loop_test::rot_axis(0, pitch) *
              loop_test::rot_axis(2, roll))
      .rotation();
}

// x_b^T F x_a = 0 for the true geometry: F = Kb^-T [t]x R Ka^-1 with x_b = R x_a + t.
std::array<double, 9> fundamental(const Camera& a, const Camera& b, const K& ka, const K& kb) {
  const M3 r = loop_test::mat_mul(loop_test::transpose(b.r), a.r);
  const V3 t = mul(loop_test::transpose(b.r), sub(a.c, b.c));
  const M3 tx = {0, -t[2], t[1], t[2], 0, -t[0], -t[1], t[0], 0};
  const M3 e = loop_test::mat_mul(tx, r);
  const M3 ika = {1 / ka.fx, 0, -ka.cx / ka.fx, 0, 1 / ka.fy, -ka.cy / ka.fy, 0, 0, 1};
  const M3 ikb = {1 / kb.fx, 0, -kb.cx / kb.fx, 0, 1 / kb.fy, -kb.cy / kb.fy, 0, 0, 1};
  return loop_test::mat_mul(loop_test::mat_mul(loop_test::transpose(ikb), e), ika);
}

// The scene: the true (metric) cameras, points seen by both, and the loop the detector would
// report, the stream's depths in its units at each frame (s_query, s_match per metre).
struct Scene {
  Camera query, match;  // metric world
  K kq{420, 415, 259, 189}, km{410, 412, 259, 189};
  std::vector<V3> points;
  double s_query = 1.7, s_match = 0.6;
  LoopClosure loop;

  Scene() {
    query = {rotation(0.3, 0.05, -0.02), {0.4, -0.1, 0.2}};
    match = {rotation(0.1, -0.04, 0.03), {-0.5, 0.05, -0.3}};
    std::mt19937 rng(7);
    std::uniform_real_distribution<double> u(-1, 1);
    while (points.size() < 120) {
      const V3 x = {3 * u(rng), 1.5 * u(rng), 6 + 2 * u(rng)};
      const V3 pq = query.to_camera(x), pm = match.to_camera(x);
      if (pq[2] < 1 || pm[2] < 1) continue;
      const auto a = kq.project(pq), b = km.project(pm);
      if (a[0] < 0 || a[0] > 518 || a[1] < 0 || a[1] > 378 || b[0] < 0 || b[0] > 518 || b[1] < 0 ||
          b[1] > 378)
        continue;
      points.push_back(x);
      loop.verification.inlier_points.push_back(
          {float(a[0]), float(a[1]), float(b[0]), float(b[1])});
      loop.query_depths.push_back(float(s_query * pq[2]));
      loop.match_depths.push_back(float(s_match * pm[2]));
    }
    loop.query = 230;
    loop.match = 4;
    loop.verification.inliers = static_cast<int>(points.size());
    loop.verification.fundamental = fundamental(query, match, kq, km);
  }

  // The pair block's view: the scene in a world of its own (rotated, moved) and in its own
  // units (k per metre); `query_rotation` turns the pair's query camera (a wrong pose).
  PairGeometry pair(double k, const M3& query_rotation = rotation(0, 0, 0),
                    const V3& query_shift = {0, 0, 0}) const {
    const M3 g = rotation(-1.1, 0.4, 0.2);
    const V3 o = {3, -2, 5};
    auto moved = [&](const Camera& c) {
      return Camera{loop_test::mat_mul(g, c.r), add(scaled(mul(g, c.c), k), o)};
    };
    Camera q = moved(query), m = moved(match);
    q.r = loop_test::mat_mul(q.r, query_rotation);
    q.c = add(q.c, query_shift);
    PairGeometry p;
    p.query_c2w = q.c2w();
    p.match_c2w = m.c2w();
    p.query_intrinsics = kq.matrix();
    p.match_intrinsics = km.matrix();
    for (const V3& x : points) {
      p.query_depths.push_back(float(k * query.to_camera(x)[2]));
      p.match_depths.push_back(float(k * match.to_camera(x)[2]));
    }
    return p;
  }
};

// Mean over the inliers of the distances to the epipolar lines of the pair's relative pose,
// each line through the projections of two points of the other pixel's ray.
double epipolar_by_rays(const Scene& s, const PairGeometry& p) {
  const Sim3 q = Sim3::from_c2w(p.query_c2w.data()), m = Sim3::from_c2w(p.match_c2w.data());
  auto cam = [](const Sim3& t) { return Camera{t.rotation(), t.t}; };
  const Camera cq = cam(q), cm = cam(m);
  auto distance = [](const Camera& from, const K& kf, const Camera& to, const K& kt, double u,
                     double v, double x, double y) {
    const V3 ray = {(u - kf.cx) / kf.fx, (v - kf.cy) / kf.fy, 1};
    const auto a = kt.project(to.to_camera(from.to_world(scaled(ray, 2))));
    const auto b = kt.project(to.to_camera(from.to_world(scaled(ray, 20))));
    const double dx = b[0] - a[0], dy = b[1] - a[1];
    return std::abs(dx * (y - a[1]) - dy * (x - a[0])) / std::hypot(dx, dy);
  };
  double sum = 0;
  for (const auto& pt : s.loop.verification.inlier_points)
    sum += distance(cq, s.kq, cm, s.km, pt[0], pt[1], pt[2], pt[3]) / 2 +
           distance(cm, s.km, cq, s.kq, pt[2], pt[3], pt[0], pt[1]) / 2;
  return sum / static_cast<double>(s.loop.verification.inlier_points.size());
}

class LoopEdgeFromPair : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!loop_detection_available()) GTEST_SKIP() << "built without OpenCV";
  }
  Scene scene;
};

TEST_F(LoopEdgeFromPair, CarriesThePairsPoseIntoTheStreamsUnitsAtBothEnds) {
  const LoopEdge e = loop_edge_from_pair(scene.loop, scene.pair(0.37));
  EXPECT_TRUE(e.accepted) << e.reason;
  EXPECT_EQ(e.edge.from, 4);
  EXPECT_EQ(e.edge.to, 230);
  EXPECT_EQ(e.edge.score, scene.loop.verification.inliers);
  // Stream depth over pair depth: s / k at each end.
  EXPECT_NEAR(e.scale_query, 1.7 / 0.37, 1e-5 * 1.7 / 0.37);
  EXPECT_NEAR(e.scale_match, 0.6 / 0.37, 1e-5 * 0.6 / 0.37);
  EXPECT_EQ(e.depth_pairs_query, static_cast<int>(scene.points.size()));
  // The definition: a point in the query camera in its stream units lands on the same point in
  // the match camera in the match's stream units.
  for (const V3& x : scene.points) {
    const V3 in_query = scaled(scene.query.to_camera(x), scene.s_query);
    const V3 in_match = scaled(scene.match.to_camera(x), scene.s_match);
    const V3 got = e.edge.relative.act(in_query);
    for (int k = 0; k < 3; ++k) EXPECT_NEAR(got[k], in_match[k], 2e-5 * 5) << k;
  }
  EXPECT_NEAR(e.edge.relative.s, 0.6 / 1.7, 1e-6);
  // The views agree with themselves.
  EXPECT_LT(e.rotation_error_deg, 0.05);
  EXPECT_LT(e.epipolar_error_px, 0.01);
}

TEST_F(LoopEdgeFromPair, ScaleIsTheMedianSoAFewWrongDepthsDoNotMoveIt) {
  // A fifth of the stream's depths wrong (a depth edge, the sky): the median keeps to the rest.
  LoopClosure l = scene.loop;
  for (size_t i = 0; i < l.query_depths.size(); i += 5) l.query_depths[i] *= 3;
  for (size_t i = 2; i < l.match_depths.size(); i += 5) l.match_depths[i] = NAN;
  const LoopEdge e = loop_edge_from_pair(l, scene.pair(2.0));
  EXPECT_TRUE(e.accepted) << e.reason;
  EXPECT_NEAR(e.scale_query, 1.7 / 2.0, 1e-5);
  EXPECT_NEAR(e.scale_match, 0.6 / 2.0, 1e-5);
  EXPECT_EQ(e.depth_pairs_match, static_cast<int>(scene.points.size() - scene.points.size() / 5));
}

TEST_F(LoopEdgeFromPair, APairRotationFarFromTheEssentialMatrixIsDropped) {
  // The pair's query camera turned by 20 degrees about its y axis: the model's relative rotation
  // is 20 degrees from the images'.
  const LoopEdge e = loop_edge_from_pair(scene.loop, scene.pair(1.0, rotation(20 * kDeg, 0, 0)));
  EXPECT_FALSE(e.accepted);
  EXPECT_EQ(e.reason, "rotation");
  EXPECT_NEAR(e.rotation_error_deg, 20, 0.05);
  // 5 degrees stays within the default threshold (10).
  const LoopEdge ok = loop_edge_from_pair(scene.loop, scene.pair(1.0, rotation(5 * kDeg, 0, 0)));
  EXPECT_NEAR(ok.rotation_error_deg, 5, 0.05);
  EXPECT_NE(ok.reason, "rotation");
}

TEST_F(LoopEdgeFromPair, APairTranslationAgainstTheEpipolarGeometryIsDropped) {
  // The rotation right, the query camera's centre moved across the baseline: the inliers leave
  // the model's epipolar lines.
  const PairGeometry p = scene.pair(1.0, rotation(0, 0, 0), {0.0, 0.9, 0.0});
  const LoopEdge e = loop_edge_from_pair(scene.loop, p);
  EXPECT_LT(e.rotation_error_deg, 0.05);
  EXPECT_FALSE(e.accepted);
  EXPECT_EQ(e.reason, "epipolar");
  const double expected = epipolar_by_rays(scene, p);
  EXPECT_GT(expected, LoopEdgeOptions{}.max_epipolar_px);
  EXPECT_NEAR(e.epipolar_error_px, expected, 1e-3 * expected);
  // A small shift: a small error, measured the same.
  const PairGeometry q = scene.pair(1.0, rotation(0, 0, 0), {0.01, 0.0, 0.0});
  const LoopEdge small = loop_edge_from_pair(scene.loop, q);
  EXPECT_NEAR(small.epipolar_error_px, epipolar_by_rays(scene, q), 1e-3);
  EXPECT_TRUE(small.accepted) << small.reason;
}

TEST_F(LoopEdgeFromPair, TooFewDepthsForTheScaleIsDropped) {
  LoopClosure l = scene.loop;
  for (size_t i = 5; i < l.query_depths.size(); ++i) l.query_depths[i] = 0;  // no depth there
  const LoopEdge e = loop_edge_from_pair(l, scene.pair(1.0));
  EXPECT_FALSE(e.accepted);
  EXPECT_EQ(e.reason, "depth");
  EXPECT_EQ(e.depth_pairs_query, 5);
}

}  // namespace
}  // namespace lingbot
