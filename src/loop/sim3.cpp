// Sim(3): composition, inverse, action, conversions, and the exponential and logarithm maps.
#include <algorithm>
#include <cmath>

#include "lingbot/error.h"
#include "lingbot/loop.h"
#include "loop/edge_residual.h"
#include "loop/mat3.h"

namespace lingbot {
namespace {

using Mat3 = mat3::M3;
using mat3::mul;

Mat3 quat_to_matrix(const std::array<double, 4>& q) {
  const double x = q[0], y = q[1], z = q[2], w = q[3];
  return {1 - 2 * (y * y + z * z), 2 * (x * y - z * w),     2 * (x * z + y * w),
          2 * (x * y + z * w),     1 - 2 * (x * x + z * z), 2 * (y * z - x * w),
          2 * (x * z - y * w),     2 * (y * z + x * w),     1 - 2 * (x * x + y * y)};
}

std::array<double, 4> normalized(std::array<double, 4> q) {
  double n = std::sqrt(q[0] * q[0] + q[1] * q[1] + q[2] * q[2] + q[3] * q[3]);
  LINGBOT_CHECK_ARG(n > 0 && std::isfinite(n), "Sim3: rotation is not finite or is zero");
  // w >= 0: one representative of q and -q, so that equal rotations compare equal.
  if (q[3] < 0) n = -n;
  for (double& v : q) v /= n;
  return q;
}

// The nearest unit quaternion to a (nearly) orthonormal matrix: the eigenvector of the largest
// eigenvalue of Bar-Itzhack's symmetric 4x4 matrix, found by power iteration on K + 3I (its
// eigenvalues of K lie in [-1, 3] for a rotation, so the shift makes the wanted one dominant),
// started from the diagonal-pivot estimate that is already exact for an exact rotation.
std::array<double, 4> matrix_to_quat(const Mat3& m) {
  for (double v : m) LINGBOT_CHECK_ARG(std::isfinite(v), "Sim3: rotation is not finite");
  const double r00 = m[0], r01 = m[1], r02 = m[2], r10 = m[3], r11 = m[4], r12 = m[5], r20 = m[6],
               r21 = m[7], r22 = m[8];
  // K (x y z w order), 1/3 of Bar-Itzhack's.
  const double k[4][4] = {
      {(r00 - r11 - r22) / 3, (r01 + r10) / 3, (r02 + r20) / 3, (r21 - r12) / 3},
      {(r01 + r10) / 3, (r11 - r00 - r22) / 3, (r12 + r21) / 3, (r02 - r20) / 3},
      {(r02 + r20) / 3, (r12 + r21) / 3, (r22 - r00 - r11) / 3, (r10 - r01) / 3},
      {(r21 - r12) / 3, (r02 - r20) / 3, (r10 - r01) / 3, (r00 + r11 + r22) / 3}};
  // Start: the column of the largest diagonal element.
  int best = 0;
  for (int i = 1; i < 4; ++i)
    if (k[i][i] > k[best][best]) best = i;
  std::array<double, 4> q{k[0][best], k[1][best], k[2][best], k[3][best]};
  q[best] += 1;  // (K + I) e_best: never zero
  for (int it = 0; it < 50; ++it) {
    std::array<double, 4> nq{};
    for (int i = 0; i < 4; ++i)
      for (int j = 0; j < 4; ++j) nq[i] += (k[i][j] + (i == j ? 1.0 : 0.0)) * q[j];
    double n = 0;
    for (double v : nq) n += v * v;
    n = std::sqrt(n);
    double change = 0;
    for (int i = 0; i < 4; ++i) {
      nq[i] /= n;
      change = std::max(change, std::abs(std::abs(nq[i]) - std::abs(q[i])));
    }
    q = nq;
    if (change < 1e-16) break;
  }
  return normalized(q);
}

// The coefficients of W = a I + b hat(w) + c hat(w)^2 = integral_0^1 e^(sigma u) exp(u hat(w)) du
// (the translation block of exp). With z = sigma + i theta, a + i theta b - theta^2 c... is best
// seen from F(z) = integral e^(z u) du = sum z^n / (n+1)!: a = sum sigma^n/(n+1)!,
// b = Im F / theta, c = (a - Re F) / theta^2. The series, written with recurrences for
// Im(z^n)/theta and (sigma^n - Re z^n)/theta^2, has no cancellation for small theta or sigma; the
// closed form is used only far from the origin.
void w_coefficients(double sigma, double theta, double& a, double& b, double& c) {
  const double r = std::hypot(sigma, theta);
  if (r <= 8) {
    double sn = 1;          // sigma^n
    double re = 1, im = 0;  // Re z^n, Im z^n / theta
    double cn = 0;          // (sigma^n - Re z^n) / theta^2
    double fact = 1;        // (n+1)!
    a = 1, b = 0, c = 0;    // n = 0 terms
    const double th2 = theta * theta;
    for (int n = 1; n < 80; ++n) {
      const double re_next = sigma * re - th2 * im;
      const double im_next = re + sigma * im;
      cn = sigma * cn + im;  // (sigma^(n) - Re z^(n)) / theta^2 from n-1
      re = re_next, im = im_next;
      sn *= sigma;
      fact *= (n + 1);
      const double ta = sn / fact, tb = im / fact, tc = cn / fact;
      a += ta, b += tb, c += tc;
      if (n > 4 && std::abs(ta) + std::abs(tb) + std::abs(tc) < 1e-18 * (std::abs(a) + 1)) break;
    }
    return;
  }
  const double es = std::exp(sigma);
  a = std::expm1(sigma) / sigma;
  if (theta < 1e-4) {
    // Far from the origin with a tiny angle: |sigma| > 8, the theta^2 terms are below 1e-8.
    b = (es * (sigma - 1) + 1) / (sigma * sigma);
    c = (es * (sigma * sigma - 2 * sigma + 2) - 2) / (2 * sigma * sigma * sigma);
    return;
  }
  const double den = sigma * sigma + theta * theta;
  const double re = (sigma * (es * std::cos(theta) - 1) + theta * es * std::sin(theta)) / den;
  const double im = (sigma * es * std::sin(theta) - theta * (es * std::cos(theta) - 1)) / den;
  b = im / theta;
  c = (a - re) / (theta * theta);
}

Mat3 w_matrix(const std::array<double, 3>& w, double sigma) {
  const double theta = std::sqrt(w[0] * w[0] + w[1] * w[1] + w[2] * w[2]);
  double a, b, c;
  w_coefficients(sigma, theta, a, b, c);
  const Mat3 h{0, -w[2], w[1], w[2], 0, -w[0], -w[1], w[0], 0};
  const Mat3 h2 = mul(h, h);
  Mat3 m{};
  for (int i = 0; i < 9; ++i) m[i] = b * h[i] + c * h2[i];
  m[0] += a, m[4] += a, m[8] += a;
  return m;
}

}  // namespace

Sim3 Sim3::from_rt(const double* r, const double* t, double s) {
  LINGBOT_CHECK_ARG(std::isfinite(s) && s > 0, "Sim3: scale must be positive and finite");
  Sim3 out;
  out.q = matrix_to_quat({r[0], r[1], r[2], r[3], r[4], r[5], r[6], r[7], r[8]});
  out.t = {t[0], t[1], t[2]};
  for (double v : out.t) LINGBOT_CHECK_ARG(std::isfinite(v), "Sim3: translation is not finite");
  out.s = s;
  return out;
}

Sim3 Sim3::from_c2w(const float* m, double s) {
  const double r[9] = {m[0], m[1], m[2], m[4], m[5], m[6], m[8], m[9], m[10]};
  const double t[3] = {m[3], m[7], m[11]};
  return from_rt(r, t, s);
}

Sim3 Sim3::from_matrix(const std::array<double, 16>& m) {
  const Mat3 a{m[0], m[1], m[2], m[4], m[5], m[6], m[8], m[9], m[10]};
  const double det = a[0] * (a[4] * a[8] - a[5] * a[7]) - a[1] * (a[3] * a[8] - a[5] * a[6]) +
                     a[2] * (a[3] * a[7] - a[4] * a[6]);
  LINGBOT_CHECK_ARG(std::isfinite(det) && det > 0,
                    "Sim3: the 3x3 block of the matrix must have a positive determinant");
  const double s = std::cbrt(det);
  double r[9];
  for (int i = 0; i < 9; ++i) r[i] = a[i] / s;
  const double t[3] = {m[3], m[7], m[11]};
  return from_rt(r, t, s);
}

std::array<double, 9> Sim3::rotation() const {
  return quat_to_matrix(q);
}

std::array<double, 16> Sim3::matrix() const {
  const Mat3 r = rotation();
  return {s * r[0], s * r[1], s * r[2], t[0], s * r[3], s * r[4], s * r[5], t[1],
          s * r[6], s * r[7], s * r[8], t[2], 0,        0,        0,        1};
}

std::array<float, 12> Sim3::rt() const {
  const Mat3 r = rotation();
  std::array<float, 12> out{};
  for (int i = 0; i < 3; ++i) {
    for (int j = 0; j < 3; ++j) out[i * 4 + j] = static_cast<float>(r[i * 3 + j]);
    out[i * 4 + 3] = static_cast<float>(t[i]);
  }
  return out;
}

std::array<double, 3> Sim3::act(const std::array<double, 3>& p) const {
  std::array<double, 3> out;
  loop_detail::quat_rotate(q.data(), p.data(), out.data());
  for (int i = 0; i < 3; ++i) out[i] = s * out[i] + t[i];
  return out;
}

Sim3 Sim3::inverse() const {
  // (s R, t)^-1 = (R^T / s, -R^T t / s)
  Sim3 out;
  out.q = {-q[0], -q[1], -q[2], q[3]};
  out.s = 1 / s;
  std::array<double, 3> rt;
  loop_detail::quat_rotate(out.q.data(), t.data(), rt.data());
  for (int i = 0; i < 3; ++i) out.t[i] = -rt[i] / s;
  out.q = normalized(out.q);
  return out;
}

Sim3 operator*(const Sim3& a, const Sim3& b) {
  // a (b p) = sa Ra (sb Rb p + tb) + ta
  Sim3 out;
  std::array<double, 4> q;
  loop_detail::quat_mul(a.q.data(), b.q.data(), q.data());
  out.q = normalized(q);
  out.s = a.s * b.s;
  const std::array<double, 3> at = a.act(b.t);
  out.t = at;
  return out;
}

Sim3 sim3_exp(const Sim3Tangent& xi) {
  for (double v : xi) LINGBOT_CHECK_ARG(std::isfinite(v), "sim3_exp: tangent is not finite");
  const std::array<double, 3> v{xi[0], xi[1], xi[2]}, w{xi[3], xi[4], xi[5]};
  const double sigma = xi[6];
  const double theta = std::sqrt(w[0] * w[0] + w[1] * w[1] + w[2] * w[2]);
  Sim3 out;
  // sin(theta/2)/theta, by its series near 0.
  const double k = theta < 1e-4 ? 0.5 - theta * theta / 48 : std::sin(theta / 2) / theta;
  out.q = normalized({k * w[0], k * w[1], k * w[2], std::cos(theta / 2)});
  out.s = std::exp(sigma);
  const Mat3 wm = w_matrix(w, sigma);
  for (int i = 0; i < 3; ++i)
    out.t[i] = wm[i * 3] * v[0] + wm[i * 3 + 1] * v[1] + wm[i * 3 + 2] * v[2];
  return out;
}

Sim3Tangent sim3_log(const Sim3& T) {
  LINGBOT_CHECK_ARG(std::isfinite(T.s) && T.s > 0, "sim3_log: scale must be positive");
  const std::array<double, 4> q = normalized(T.q);
  std::array<double, 3> w;
  loop_detail::quat_to_rotvec(q.data(), w.data());
  const double sigma = std::log(T.s);
  const Mat3 m = w_matrix(w, sigma);
  // v = W^-1 t by Cramer's rule (W is invertible: its eigenvalues are F(sigma + i theta) and
  // (e^sigma - 1)/sigma, none zero for theta < 2 pi).
  const double det = m[0] * (m[4] * m[8] - m[5] * m[7]) - m[1] * (m[3] * m[8] - m[5] * m[6]) +
                     m[2] * (m[3] * m[7] - m[4] * m[6]);
  const Mat3 inv{(m[4] * m[8] - m[5] * m[7]) / det, (m[2] * m[7] - m[1] * m[8]) / det,
                 (m[1] * m[5] - m[2] * m[4]) / det, (m[5] * m[6] - m[3] * m[8]) / det,
                 (m[0] * m[8] - m[2] * m[6]) / det, (m[2] * m[3] - m[0] * m[5]) / det,
                 (m[3] * m[7] - m[4] * m[6]) / det, (m[1] * m[6] - m[0] * m[7]) / det,
                 (m[0] * m[4] - m[1] * m[3]) / det};
  Sim3Tangent xi{};
  for (int i = 0; i < 3; ++i)
    xi[i] = inv[i * 3] * T.t[0] + inv[i * 3 + 1] * T.t[1] + inv[i * 3 + 2] * T.t[2];
  xi[3] = w[0], xi[4] = w[1], xi[5] = w[2];
  xi[6] = sigma;
  return xi;
}

}  // namespace lingbot
