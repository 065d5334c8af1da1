#include "stream/keyframes.h"

#include <cmath>

#include "lingbot/error.h"

namespace lingbot {

double flow_magnitude(const FrameResult& current, const std::array<float, 12>& key_c2w,
                      const std::array<float, 9>& key_K, int stride) {
  LINGBOT_CHECK(stride >= 1, "flow stride must be at least 1");
  const int64_t h = current.height, w = current.width;
  LINGBOT_CHECK(h >= 0 && w >= 0 && static_cast<int64_t>(current.depth.size()) == h * w,
                "flow needs the frame's depth map");
  const auto& kc = current.intrinsics;
  const auto& rc = current.c2w;
  const auto& rk = key_c2w;
  const auto& kk = key_K;
  // Back substitution rather than a general inverse: K is upper triangular, and a zero field of
  // view (infinite focal length) must lift to the optical axis instead of producing inf * 0.
  const double a = kc[0], b = kc[1], c = kc[2], d = kc[4], e = kc[5], g = kc[8];
  const double rz = 1.0 / g;
  double sum = 0;
  int64_t valid = 0;
  for (int64_t v = 0; v < h; v += stride) {
    for (int64_t u = 0; u < w; u += stride) {
      const double depth = current.depth[v * w + u];
      if (!(depth > 1e-6)) continue;
      const double ry = (v - e * rz) / d;
      const double rx = (u - b * ry - c * rz) / a;
      const double xc[3] = {depth * rx, depth * ry, depth * rz};
      double xw[3];
      for (int i = 0; i < 3; ++i)
        xw[i] = rc[4 * i] * xc[0] + rc[4 * i + 1] * xc[1] + rc[4 * i + 2] * xc[2] + rc[4 * i + 3];
      const double dw[3] = {xw[0] - rk[3], xw[1] - rk[7], xw[2] - rk[11]};
      // R_k^T: the reference inverts the keyframe pose as a rigid transform.
      double xk[3];
      for (int i = 0; i < 3; ++i) xk[i] = rk[i] * dw[0] + rk[4 + i] * dw[1] + rk[8 + i] * dw[2];
      if (!(xk[2] > 1e-6)) continue;
      const double z = xk[2];
      const double pu = (kk[0] * xk[0] + kk[1] * xk[1] + kk[2] * xk[2]) / z;
      const double pv = (kk[3] * xk[0] + kk[4] * xk[1] + kk[5] * xk[2]) / z;
      const double moved = std::hypot(pu - static_cast<double>(u), pv - static_cast<double>(v));
      // A zero field of view (infinite focal length, which the head's ReLU allows) projects to
      // infinity; such a sample says nothing measurable, and one of them must not decide alone.
      if (!std::isfinite(moved)) continue;
      sum += moved;
      ++valid;
    }
  }
  return valid ? sum / static_cast<double>(valid) : 0.0;
}

}  // namespace lingbot
