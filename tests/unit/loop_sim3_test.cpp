// Sim(3) helpers against an independent computation: 4x4 matrix products and a matrix
// exponential by scaling and squaring of its Taylor series (no closed form in common with
// src/loop/sim3.cpp), round trips, and the windowed-loop edge identity.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "lingbot/error.h"
#include "lingbot/loop.h"

namespace lingbot {
namespace {

using M4 = std::array<double, 16>;

M4 mul4(const M4& a, const M4& b) {
  M4 c{};
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 4; ++j)
      for (int k = 0; k < 4; ++k) c[i * 4 + j] += a[i * 4 + k] * b[k * 4 + j];
  return c;
}

// exp of a 4x4 matrix: scale by 2^-k until the norm is below 1/2, 30 Taylor terms, square k times.
M4 expm4(const M4& a) {
  double norm = 0;
  for (double v : a) norm = std::max(norm, std::abs(v));
  int k = 0;
  while (norm * 4 > 0.5) norm /= 2, ++k;
  M4 x = a;
  for (double& v : x) v = std::ldexp(v, -k);
  M4 sum{}, term{};
  for (int i = 0; i < 4; ++i) sum[i * 5] = term[i * 5] = 1;
  for (int n = 1; n < 30; ++n) {
    term = mul4(term, x);
    for (double& v : term) v /= n;
    for (int i = 0; i < 16; ++i) sum[i] += term[i];
  }
  for (int i = 0; i < k; ++i) sum = mul4(sum, sum);
  return sum;
}

M4 generator(const Sim3Tangent& xi) {  // [[hat(w) + sigma I, v], [0, 0]]
  const double s = xi[6];
  return {s, -xi[5], xi[4], xi[0], xi[5], s, -xi[3], xi[1], -xi[4], xi[3], s, xi[2], 0, 0, 0, 0};
}

void expect_near(const M4& a, const M4& b, double tol, const char* what) {
  for (int i = 0; i < 16; ++i) EXPECT_NEAR(a[i], b[i], tol) << what << " element " << i;
}

Sim3Tangent random_tangent(std::mt19937& rng, double rot, double trans, double scale) {
  std::uniform_real_distribution<double> u(-1, 1);
  Sim3Tangent xi;
  for (int i = 0; i < 3; ++i) xi[i] = trans * u(rng);
  // A rotation vector of length up to `rot`.
  double w[3] = {u(rng), u(rng), u(rng)};
  const double n = std::sqrt(w[0] * w[0] + w[1] * w[1] + w[2] * w[2]);
  const double angle = rot * std::abs(u(rng));
  for (int i = 0; i < 3; ++i) xi[3 + i] = w[i] / n * angle;
  xi[6] = scale * u(rng);
  return xi;
}

TEST(LoopSim3, ExpMatchesMatrixExponential) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 300; ++trial) {
    // Large, small and tiny tangents (the series and closed-form branches of W).
    const double mag = trial < 100 ? 1.0 : trial < 200 ? 1e-3 : 1e-8;
    const Sim3Tangent xi = random_tangent(rng, 3.0 * mag, 5 * mag, 1.5 * mag);
    expect_near(sim3_exp(xi).matrix(), expm4(generator(xi)), 1e-11, "exp");
  }
  // Far from the origin (|sigma| > 8: the closed form).
  for (double sigma : {-9.0, 9.5}) {
    const Sim3Tangent xi{0.3, -0.2, 0.5, 0.4, -1.1, 0.7, sigma};
    const M4 a = sim3_exp(xi).matrix(), b = expm4(generator(xi));
    for (int i = 0; i < 16; ++i) EXPECT_NEAR(a[i], b[i], 1e-9 * (1 + std::abs(b[i]))) << i;
  }
  // Pure rotation, pure translation, pure scale.
  const Sim3 r = sim3_exp({0, 0, 0, 0, 0, M_PI / 2, 0});
  expect_near(r.matrix(), {0, -1, 0, 0, 1, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1}, 1e-15, "rot");
  const Sim3 t = sim3_exp({1, 2, 3, 0, 0, 0, 0});
  expect_near(t.matrix(), {1, 0, 0, 1, 0, 1, 0, 2, 0, 0, 1, 3, 0, 0, 0, 1}, 1e-15, "trans");
  const Sim3 s = sim3_exp({0, 0, 0, 0, 0, 0, std::log(2.0)});
  expect_near(s.matrix(), {2, 0, 0, 0, 0, 2, 0, 0, 0, 0, 2, 0, 0, 0, 0, 1}, 1e-15, "scale");
}

TEST(LoopSim3, LogInvertsExp) {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 300; ++trial) {
    const double mag = trial < 100 ? 1.0 : trial < 200 ? 1e-4 : 1e-9;
    const Sim3Tangent xi = random_tangent(rng, 3.1 * mag, 4 * mag, 2 * mag);
    const Sim3Tangent back = sim3_log(sim3_exp(xi));
    for (int i = 0; i < 7; ++i) EXPECT_NEAR(back[i], xi[i], 1e-10 * std::max(1.0, mag)) << i;
  }
  // exp(log(T)) == T for random transforms, rotations up to near pi included.
  for (int trial = 0; trial < 100; ++trial) {
    const Sim3 T = sim3_exp(random_tangent(rng, 3.14, 10, 2));
    expect_near(sim3_exp(sim3_log(T)).matrix(), T.matrix(), 1e-10, "exp(log)");
  }
  // Exactly pi about x.
  Sim3 flip;
  flip.q = {1, 0, 0, 0};
  flip.t = {1, 2, 3};
  const Sim3Tangent l = sim3_log(flip);
  EXPECT_NEAR(std::abs(l[3]), M_PI, 1e-12);
  expect_near(sim3_exp(l).matrix(), flip.matrix(), 1e-12, "pi");
}

TEST(LoopSim3, ComposeInverseActMatchMatrices) {
  std::mt19937 rng(3);
  for (int trial = 0; trial < 200; ++trial) {
    const Sim3 a = sim3_exp(random_tangent(rng, 3, 5, 1));
    const Sim3 b = sim3_exp(random_tangent(rng, 3, 5, 1));
    expect_near((a * b).matrix(), mul4(a.matrix(), b.matrix()), 1e-12, "compose");
    const M4 id{1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1};
    expect_near(mul4(a.inverse().matrix(), a.matrix()), id, 1e-12, "inverse");
    const std::array<double, 3> p{0.3, -1.2, 2.5};
    const std::array<double, 3> q = a.act(p);
    const M4 m = a.matrix();
    for (int i = 0; i < 3; ++i)
      EXPECT_NEAR(q[i], m[i * 4] * p[0] + m[i * 4 + 1] * p[1] + m[i * 4 + 2] * p[2] + m[i * 4 + 3],
                  1e-12);
    // Matrix round trip.
    expect_near(Sim3::from_matrix(m).matrix(), m, 1e-12, "from_matrix");
  }
}

TEST(LoopSim3, FromC2wReadsRowMajorRtAndOrthonormalises) {
  // 90 degrees about z, translation (1, 2, 3), in float with a slight skew.
  const float c2w[12] = {0, -1.0001f, 0, 1, 1, 0, 0, 2, 0, 0, 0.9999f, 3};
  const Sim3 p = Sim3::from_c2w(c2w);
  const std::array<double, 9> r = p.rotation();
  const double want[9] = {0, -1, 0, 1, 0, 0, 0, 0, 1};
  for (int i = 0; i < 9; ++i) EXPECT_NEAR(r[i], want[i], 1e-4);
  // Exactly orthonormal rows.
  EXPECT_NEAR(r[0] * r[0] + r[1] * r[1] + r[2] * r[2], 1, 1e-14);
  EXPECT_EQ(p.t, (std::array<double, 3>{1, 2, 3}));
  const std::array<float, 12> back = p.rt();
  EXPECT_NEAR(back[1], -1, 1e-4);
  EXPECT_EQ(back[3], 1);
}

TEST(LoopSim3, BadInputThrows) {
  EXPECT_THROW(Sim3::from_matrix({-1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1}), Error);
  const float nan_c2w[12] = {NAN, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0};
  EXPECT_THROW(Sim3::from_c2w(nan_c2w), Error);
  EXPECT_THROW(sim3_exp({0, 0, 0, 0, 0, 0, NAN}), Error);
  Sim3 bad;
  bad.s = 0;
  EXPECT_THROW(sim3_log(bad), Error);
}

TEST(LoopSim3, WindowLoopEdgeJoinsTheWindows) {
  // W_u P_a Z = W_v P_b must hold for the edge's W_u^-1 W_v.
  std::mt19937 rng(5);
  const Sim3 wu = sim3_exp(random_tangent(rng, 1, 3, 0.3));
  const Sim3 wv = sim3_exp(random_tangent(rng, 1, 3, 0.3));
  const Sim3 pa = sim3_exp(random_tangent(rng, 1, 3, 0.3));
  const Sim3 pb = sim3_exp(random_tangent(rng, 1, 3, 0.3));
  const Sim3 z = (wu * pa).inverse() * (wv * pb);  // the true T_a^-1 T_b in the world
  const PoseEdge e = window_loop_edge(2, pa, 7, pb, z, 42);
  EXPECT_EQ(e.from, 2);
  EXPECT_EQ(e.to, 7);
  EXPECT_EQ(e.score, 42);
  expect_near(e.relative.matrix(), (wu.inverse() * wv).matrix(), 1e-12, "window edge");
}

TEST(LoopSim3, CorrectionsFollowTheNearestNode) {
  PoseCorrections c;
  EXPECT_EQ(c.nearest(5).matrix(), Sim3{}.matrix());
  c.nodes = {10, 20, 30};
  for (double s : {2.0, 3.0, 4.0}) {
    Sim3 x;
    x.s = s;
    c.corrections.push_back(x);
  }
  EXPECT_EQ(c.nearest(0).s, 2);   // before the first
  EXPECT_EQ(c.nearest(14).s, 2);  // nearer 10
  EXPECT_EQ(c.nearest(15).s, 2);  // a tie goes to the earlier
  EXPECT_EQ(c.nearest(16).s, 3);
  EXPECT_EQ(c.nearest(30).s, 4);
  EXPECT_EQ(c.nearest(99).s, 4);  // after the last: the last
  EXPECT_EQ(c.of(20)->s, 3);
  EXPECT_EQ(c.of(21), nullptr);
  Sim3 streamed;
  streamed.t = {1, 0, 0};
  EXPECT_EQ(c.correct(29, streamed).t[0], 4);
  const std::vector<std::array<float, 12>> poses(3, {1, 0, 0, 1, 0, 1, 0, 0, 0, 0, 1, 0});
  const std::vector<Sim3> all = c.correct_all(poses);
  ASSERT_EQ(all.size(), 3u);
  EXPECT_EQ(all[2].t[0], 2);
  EXPECT_EQ(all[2].s, 2);
}

}  // namespace
}  // namespace lingbot
