// The residual of one pose-graph edge, templated so that the same code is evaluated in doubles
// (outlier tests, costs, reports) and in Ceres' Jets (automatic derivatives). No Ceres here: the
// library without Ceres uses it too.
//
// A node is (q: unit quaternion x y z w, t: 3, l: log scale). An edge measures Z = T_i^-1 T_j;
// the error is E = Z^-1 T_i^-1 T_j and the residual (translation of E, rotation vector of E,
// log scale of E), each divided by its standard deviation. It is zero exactly when the edge is
// satisfied, and equals sim3_log(E) to first order.
#pragma once

#include <cmath>

namespace lingbot::loop_detail {

// Standard deviations, already in the residual's units (translation: world/stream units).
struct EdgeSigmas {
  double translation = 1, rotation = 1, scale = 1;
};

// The measurement, stored as its inverse's pieces for the residual.
struct EdgeMeasurement {
  double q[4];  // Z's rotation (x y z w)
  double t[3];  // Z's translation
  double l;     // log of Z's scale
};

template <typename T>
inline void quat_mul(const T* a, const T* b, T* out) {  // a * b, both x y z w
  const T x = a[3] * b[0] + a[0] * b[3] + a[1] * b[2] - a[2] * b[1];
  const T y = a[3] * b[1] - a[0] * b[2] + a[1] * b[3] + a[2] * b[0];
  const T z = a[3] * b[2] + a[0] * b[1] - a[1] * b[0] + a[2] * b[3];
  const T w = a[3] * b[3] - a[0] * b[0] - a[1] * b[1] - a[2] * b[2];
  out[0] = x, out[1] = y, out[2] = z, out[3] = w;
}

template <typename T>
inline void quat_rotate(const T* q, const T* v, T* out) {  // R(q) v, q unit
  // v + 2 w (u x v) + 2 u x (u x v), u = vector part
  const T cx = q[1] * v[2] - q[2] * v[1];
  const T cy = q[2] * v[0] - q[0] * v[2];
  const T cz = q[0] * v[1] - q[1] * v[0];
  const T dx = q[1] * cz - q[2] * cy;
  const T dy = q[2] * cx - q[0] * cz;
  const T dz = q[0] * cy - q[1] * cx;
  out[0] = v[0] + T(2) * (q[3] * cx + dx);
  out[1] = v[1] + T(2) * (q[3] * cy + dy);
  out[2] = v[2] + T(2) * (q[3] * cz + dz);
}

// The rotation vector of a unit quaternion, angle in [0, pi] (q and -q give the same).
template <typename T>
inline void quat_to_rotvec(const T* q, T* out) {
  using std::atan2;
  using std::sqrt;
  const T n2 = q[0] * q[0] + q[1] * q[1] + q[2] * q[2];
  T k;
  if (n2 > T(1e-24)) {
    const T n = sqrt(n2);
    // 2 atan2(n, w) / n, with w < 0 flipped so that the angle stays below pi.
    k = q[3] < T(0) ? T(2) * atan2(-n, -q[3]) / n : T(2) * atan2(n, q[3]) / n;
  } else {
    // First order (exact derivative at the identity): 2 / w.
    k = T(2) / q[3];
  }
  out[0] = k * q[0], out[1] = k * q[1], out[2] = k * q[2];
}

// residual[7] for the edge i -> j. q* must be unit quaternions.
template <typename T>
inline void edge_residual(const T* qi, const T* ti, const T* li, const T* qj, const T* tj,
                          const T* lj, const EdgeMeasurement& z, const EdgeSigmas& sigma,
                          T* residual) {
  using std::exp;
  // Relative pose T_i^-1 T_j: rotation qi^-1 qj, translation e^-li Ri^T (tj - ti), log scale
  // lj - li.
  const T qi_inv[4] = {-qi[0], -qi[1], -qi[2], qi[3]};
  T q_rel[4];
  quat_mul(qi_inv, qj, q_rel);
  const T d[3] = {tj[0] - ti[0], tj[1] - ti[1], tj[2] - ti[2]};
  T t_rel[3];
  quat_rotate(qi_inv, d, t_rel);
  const T inv_si = exp(-li[0]);
  // Error Z^-1 (T_i^-1 T_j): rotation qz^-1 q_rel, translation e^-lz Rz^T (t_rel - tz).
  const T qz_inv[4] = {T(-z.q[0]), T(-z.q[1]), T(-z.q[2]), T(z.q[3])};
  T q_err[4];
  quat_mul(qz_inv, q_rel, q_err);
  const T dt[3] = {t_rel[0] * inv_si - T(z.t[0]), t_rel[1] * inv_si - T(z.t[1]),
                   t_rel[2] * inv_si - T(z.t[2])};
  T t_err[3];
  quat_rotate(qz_inv, dt, t_err);
  const T inv_sz = T(std::exp(-z.l));
  T rv[3];
  quat_to_rotvec(q_err, rv);
  for (int k = 0; k < 3; ++k) {
    residual[k] = t_err[k] * inv_sz / T(sigma.translation);
    residual[3 + k] = rv[k] / T(sigma.rotation);
  }
  residual[6] = (lj[0] - li[0] - T(z.l)) / T(sigma.scale);
}

}  // namespace lingbot::loop_detail
