// For the pose-graph tests: a synthetic two-lap trajectory whose odometry drifts in scale and
// yaw as the model's does, loop edges (true with noise, and fabricated outliers), and ATE after
// a Sim(3) Umeyama alignment written here from its definition (independent of the product's
// eval module).
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <random>
#include <vector>

#include "lingbot/loop.h"

namespace lingbot::loop_test {

using V3 = std::array<double, 3>;
using M3 = std::array<double, 9>;

inline M3 mat_mul(const M3& a, const M3& b) {
  M3 c{};
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j)
      for (int k = 0; k < 3; ++k) c[i * 3 + j] += a[i * 3 + k] * b[k * 3 + j];
  return c;
}
inline M3 transpose(const M3& a) {
  return {a[0], a[3], a[6], a[1], a[4], a[7], a[2], a[5], a[8]};
}
inline double det3(const M3& a) {
  return a[0] * (a[4] * a[8] - a[5] * a[7]) - a[1] * (a[3] * a[8] - a[5] * a[6]) +
         a[2] * (a[3] * a[7] - a[4] * a[6]);
}

// Eigen-decomposition of a symmetric 3x3 matrix by cyclic Jacobi rotations: a = V diag(d) V^T,
// columns of V the eigenvectors.
inline void jacobi_eigen(M3 a, M3& v, V3& d) {
  v = {1, 0, 0, 0, 1, 0, 0, 0, 1};
  for (int sweep = 0; sweep < 50; ++sweep) {
    const double off = a[1] * a[1] + a[2] * a[2] + a[5] * a[5];
    if (off < 1e-30) break;
    for (int p = 0; p < 2; ++p)
      for (int q = p + 1; q < 3; ++q) {
        const double apq = a[p * 3 + q];
        if (std::abs(apq) < 1e-300) continue;
        const double theta = (a[q * 3 + q] - a[p * 3 + p]) / (2 * apq);
        const double t = (theta >= 0 ? 1 : -1) / (std::abs(theta) + std::sqrt(theta * theta + 1));
        const double c = 1 / std::sqrt(t * t + 1), s = t * c;
        // a <- J^T a J, v <- v J with J the rotation in the (p, q) plane.
        for (int k = 0; k < 3; ++k) {
          const double akp = a[k * 3 + p], akq = a[k * 3 + q];
          a[k * 3 + p] = c * akp - s * akq;
          a[k * 3 + q] = s * akp + c * akq;
        }
        for (int k = 0; k < 3; ++k) {
          const double apk = a[p * 3 + k], aqk = a[q * 3 + k];
          a[p * 3 + k] = c * apk - s * aqk;
          a[q * 3 + k] = s * apk + c * aqk;
        }
        for (int k = 0; k < 3; ++k) {
          const double vkp = v[k * 3 + p], vkq = v[k * 3 + q];
          v[k * 3 + p] = c * vkp - s * vkq;
          v[k * 3 + q] = s * vkp + c * vkq;
        }
      }
  }
  d = {a[0], a[4], a[8]};
}

// Umeyama (1991): the similarity (c, R, t) minimising sum |y_i - (c R x_i + t)|^2.
// Sigma = 1/n sum (y - mu_y)(x - mu_x)^T = U D V^T; S = diag(1, 1, det(U) det(V) < 0 ? -1 : 1);
// R = U S V^T; c = tr(D S) / sigma_x^2; t = mu_y - c R mu_x. The SVD from the eigenvectors of
// Sigma^T Sigma (V, D^2) and U = Sigma V D^-1 (the last column completing a basis when rank 2).
struct Similarity {
  double c = 1;
  M3 r{1, 0, 0, 0, 1, 0, 0, 0, 1};
  V3 t{0, 0, 0};
};
inline Similarity umeyama(const std::vector<V3>& x, const std::vector<V3>& y) {
  const double n = static_cast<double>(x.size());
  V3 mx{}, my{};
  for (size_t i = 0; i < x.size(); ++i)
    for (int k = 0; k < 3; ++k) mx[k] += x[i][k] / n, my[k] += y[i][k] / n;
  M3 sigma{};
  double var_x = 0;
  for (size_t i = 0; i < x.size(); ++i)
    for (int a = 0; a < 3; ++a) {
      var_x += (x[i][a] - mx[a]) * (x[i][a] - mx[a]) / n;
      for (int b = 0; b < 3; ++b) sigma[a * 3 + b] += (y[i][a] - my[a]) * (x[i][b] - mx[b]) / n;
    }
  M3 v;
  V3 d2;
  jacobi_eigen(mat_mul(transpose(sigma), sigma), v, d2);
  // Descending singular values.
  int order[3] = {0, 1, 2};
  std::sort(order, order + 3, [&](int a, int b) { return d2[a] > d2[b]; });
  M3 vs{}, u{};
  V3 dv{};
  for (int j = 0; j < 3; ++j) {
    for (int k = 0; k < 3; ++k) vs[k * 3 + j] = v[k * 3 + order[j]];
    dv[j] = std::sqrt(std::max(0.0, d2[order[j]]));
  }
  for (int j = 0; j < 3; ++j) {
    V3 col{};
    for (int k = 0; k < 3; ++k)
      for (int m = 0; m < 3; ++m) col[k] += sigma[k * 3 + m] * vs[m * 3 + j];
    if (j == 2 && dv[2] < 1e-12 * dv[0]) {
      col = {u[3] * u[7] - u[6] * u[4], u[6] * u[1] - u[0] * u[7], u[0] * u[4] - u[3] * u[1]};
    } else {
      for (double& c : col) c /= dv[j];
    }
    for (int k = 0; k < 3; ++k) u[k * 3 + j] = col[k];
  }
  const double s3 = det3(u) * det3(vs) < 0 ? -1 : 1;
  M3 us = u;
  for (int k = 0; k < 3; ++k) us[k * 3 + 2] *= s3;
  Similarity out;
  out.r = mat_mul(us, transpose(vs));
  out.c = (dv[0] + dv[1] + s3 * dv[2]) / var_x;
  for (int k = 0; k < 3; ++k) {
    double rx = 0;
    for (int m = 0; m < 3; ++m) rx += out.r[k * 3 + m] * mx[m];
    out.t[k] = my[k] - out.c * rx;
  }
  return out;
}

// ATE: RMSE of positions after the Umeyama similarity that best maps `est` onto `gt`.
inline double ate(const std::vector<V3>& est, const std::vector<V3>& gt) {
  const Similarity s = umeyama(est, gt);
  double sum = 0;
  for (size_t i = 0; i < est.size(); ++i)
    for (int k = 0; k < 3; ++k) {
      double p = s.t[k];
      for (int m = 0; m < 3; ++m) p += s.c * s.r[k * 3 + m] * est[i][m];
      sum += (p - gt[i][k]) * (p - gt[i][k]);
    }
  return std::sqrt(sum / est.size());
}

inline Sim3 rot_axis(int axis, double angle) {
  Sim3 r;
  r.q = {0, 0, 0, std::cos(angle / 2)};
  r.q[axis] = std::sin(angle / 2);
  return r;
}

// Two laps of a circle (radius 10, a height wave), the camera looking along the path
// (OpenCV axes: y down = -z world). The odometry between keyframes drifts: the scale creeps by
// `scale_rate` a keyframe (varying within +-40 % of it along the path), the yaw by `yaw_rate`
// radians a keyframe, plus noise.
struct Trajectory {
  std::vector<Sim3> truth;     // camera to world, metric
  std::vector<Sim3> streamed;  // what the stream reports (drifted)
  std::vector<double> lambda;  // stream units per metre at each keyframe
  int per_lap = 0;
};

inline Trajectory make_trajectory(int keyframes, int laps, double scale_rate, double yaw_rate,
                                  uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> noise(0, 1);
  Trajectory tr;
  tr.per_lap = keyframes / laps;
  for (int i = 0; i < keyframes; ++i) {
    const double phi = 2 * M_PI * i / tr.per_lap;
    const V3 c{10 * std::cos(phi), 10 * std::sin(phi), 0.5 * std::sin(3 * phi)};
    // Columns: x right = (cos, sin, 0), y down = (0, 0, -1), z forward = (-sin, cos, 0).
    const double r[9] = {
        std::cos(phi), 0, -std::sin(phi), std::sin(phi), 0, std::cos(phi), 0, -1, 0};
    tr.truth.push_back(Sim3::from_rt(r, c.data()));
  }
  tr.streamed.push_back(tr.truth[0]);
  tr.lambda.push_back(1);
  for (int i = 0; i + 1 < keyframes; ++i) {
    const Sim3 d = tr.truth[i].inverse() * tr.truth[i + 1];
    const double rate = scale_rate * (1 + 0.4 * std::sin(2 * M_PI * 1.3 * i / keyframes));
    Sim3 step = d;
    step = step * rot_axis(1, yaw_rate + 0.0005 * noise(rng)) * rot_axis(0, 0.0005 * noise(rng)) *
           rot_axis(2, 0.0005 * noise(rng));
    const double len = std::sqrt(d.t[0] * d.t[0] + d.t[1] * d.t[1] + d.t[2] * d.t[2]);
    for (int k = 0; k < 3; ++k) step.t[k] = tr.lambda[i] * (d.t[k] + 0.01 * len * noise(rng));
    tr.streamed.push_back(tr.streamed[i] * step);
    tr.lambda.push_back(tr.lambda[i] * (1 + rate));
  }
  return tr;
}

// The true loop measurement T_a^-1 T_b in the stream's local units: rotation Ra^T Rb,
// translation lambda_a Ra^T (cb - ca), scale lambda_a / lambda_b; with noise.
inline PoseEdge true_loop(const Trajectory& tr, int a, int b, std::mt19937& rng, double rot_noise,
                          double trans_noise, double scale_noise) {
  std::normal_distribution<double> n(0, 1);
  Sim3 z = tr.truth[a].inverse() * tr.truth[b];
  for (double& v : z.t) v = tr.lambda[a] * (v + trans_noise * n(rng));
  z.s = tr.lambda[a] / tr.lambda[b] * std::exp(scale_noise * n(rng));
  z = z * rot_axis(0, rot_noise * n(rng)) * rot_axis(1, rot_noise * n(rng)) *
      rot_axis(2, rot_noise * n(rng));
  return {a, b, z, 100};
}

// A loop between two places far apart that claims they are close (perceptual aliasing): a yaw
// within +-30 degrees, an offset under a metre, a scale within 20 %.
inline PoseEdge outlier_loop(const Trajectory& tr, std::mt19937& rng) {
  std::uniform_int_distribution<int> pick(0, static_cast<int>(tr.truth.size()) - 1);
  std::uniform_real_distribution<double> u(-1, 1);
  for (;;) {
    int a = pick(rng), b = pick(rng);
    if (a > b) std::swap(a, b);
    const V3& ca = tr.truth[a].t;
    const V3& cb = tr.truth[b].t;
    const double dist = std::hypot(ca[0] - cb[0], ca[1] - cb[1], ca[2] - cb[2]);
    if (b - a < 20 || dist < 4) continue;
    Sim3 z = rot_axis(1, 0.5 * u(rng));
    z.t = {0.5 * u(rng) * tr.lambda[a], 0.2 * u(rng) * tr.lambda[a], 0.8 * u(rng) * tr.lambda[a]};
    z.s = std::exp(0.2 * u(rng));
    return {a, b, z, 30};
  }
}

inline std::vector<V3> positions(const std::vector<Sim3>& poses) {
  std::vector<V3> p;
  for (const Sim3& s : poses) p.push_back(s.t);
  return p;
}

}  // namespace lingbot::loop_test
