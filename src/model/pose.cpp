#include "model/pose.h"

#include <algorithm>
#include <cmath>

namespace lingbot {

CameraPose decode_pose(const float pose_enc[9], int H, int W) {
  const double tx = pose_enc[0], ty = pose_enc[1], tz = pose_enc[2];
  const double i = pose_enc[3], j = pose_enc[4], k = pose_enc[5], r = pose_enc[6];
  const double s = 2.0 / (i * i + j * j + k * k + r * r);
  const double R[3][3] = {
      {1 - s * (j * j + k * k), s * (i * j - k * r), s * (i * k + j * r)},
      {s * (i * j + k * r), 1 - s * (i * i + k * k), s * (j * k - i * r)},
      {s * (i * k - j * r), s * (j * k + i * r), 1 - s * (i * i + j * j)},
  };
  const double T[3] = {tx, ty, tz};

  CameraPose p{};
  for (int a = 0; a < 3; ++a) {
    double minus_rt_t = 0;
    for (int b = 0; b < 3; ++b) {
      p.c2w[a][b] = static_cast<float>(R[a][b]);
      p.w2c[a][b] = static_cast<float>(R[b][a]);
      minus_rt_t -= R[b][a] * T[b];
    }
    p.c2w[a][3] = static_cast<float>(T[a]);
    p.w2c[a][3] = static_cast<float>(minus_rt_t);
  }

  const double fy = (H / 2.0) / std::tan(pose_enc[7] / 2.0);
  const double fx = (W / 2.0) / std::tan(pose_enc[8] / 2.0);
  p.K[0][0] = static_cast<float>(fx);
  p.K[1][1] = static_cast<float>(fy);
  p.K[0][2] = static_cast<float>(W / 2.0);
  p.K[1][2] = static_cast<float>(H / 2.0);
  p.K[2][2] = 1.0f;
  return p;
}

void encode_pose(const CameraPose& pose, int H, int W, float pose_enc[9]) {
  const auto m = [&](int a, int b) { return static_cast<double>(pose.c2w[a][b]); };
  // Each candidate is exact up to a scale; dividing the one with the largest |component| keeps
  // the division well conditioned (the 0.1 floor only matters for degenerate matrices).
  const double diag[4] = {1 + m(0, 0) + m(1, 1) + m(2, 2), 1 + m(0, 0) - m(1, 1) - m(2, 2),
                          1 - m(0, 0) + m(1, 1) - m(2, 2), 1 - m(0, 0) - m(1, 1) + m(2, 2)};
  double q_abs[4];
  for (int c = 0; c < 4; ++c) q_abs[c] = std::sqrt(std::max(0.0, diag[c]));
  // Rows are (r, i, j, k) candidates built from the off-diagonal sums and differences.
  const double cand[4][4] = {
      {q_abs[0] * q_abs[0], m(2, 1) - m(1, 2), m(0, 2) - m(2, 0), m(1, 0) - m(0, 1)},
      {m(2, 1) - m(1, 2), q_abs[1] * q_abs[1], m(1, 0) + m(0, 1), m(0, 2) + m(2, 0)},
      {m(0, 2) - m(2, 0), m(1, 0) + m(0, 1), q_abs[2] * q_abs[2], m(1, 2) + m(2, 1)},
      {m(1, 0) - m(0, 1), m(2, 0) + m(0, 2), m(2, 1) + m(1, 2), q_abs[3] * q_abs[3]},
  };
  const int best = static_cast<int>(std::max_element(q_abs, q_abs + 4) - q_abs);
  const double denom = 2.0 * std::max(q_abs[best], 0.1);
  double rijk[4];
  for (int c = 0; c < 4; ++c) rijk[c] = cand[best][c] / denom;
  const double sign = rijk[0] < 0 ? -1.0 : 1.0;

  for (int a = 0; a < 3; ++a) pose_enc[a] = pose.c2w[a][3];
  pose_enc[3] = static_cast<float>(sign * rijk[1]);
  pose_enc[4] = static_cast<float>(sign * rijk[2]);
  pose_enc[5] = static_cast<float>(sign * rijk[3]);
  pose_enc[6] = static_cast<float>(sign * rijk[0]);
  pose_enc[7] = static_cast<float>(2.0 * std::atan((H / 2.0) / pose.K[1][1]));
  pose_enc[8] = static_cast<float>(2.0 * std::atan((W / 2.0) / pose.K[0][0]));
}

}  // namespace lingbot
