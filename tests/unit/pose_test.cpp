// Pose encoding <-> camera: quaternion convention, inverse, intrinsics, round trip.
#include "model/pose.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

namespace lingbot {
namespace {

constexpr double kPi = 3.14159265358979323846;

void expect_matrix(const float (&m)[3][4], const double (&want)[3][4], double tol) {
  for (int a = 0; a < 3; ++a)
    for (int b = 0; b < 4; ++b) EXPECT_NEAR(m[a][b], want[a][b], tol) << a << "," << b;
}

TEST(Pose, IdentityQuaternion) {
  const float enc[9] = {1, 2, 3, 0, 0, 0, 1, 1.0f, 1.2f};
  const CameraPose p = decode_pose(enc, 56, 70);
  const double want[3][4] = {{1, 0, 0, 1}, {0, 1, 0, 2}, {0, 0, 1, 3}};
  expect_matrix(p.c2w, want, 0);
  const double inv[3][4] = {{1, 0, 0, -1}, {0, 1, 0, -2}, {0, 0, 1, -3}};
  expect_matrix(p.w2c, inv, 0);
}

TEST(Pose, QuaternionIsXyzwAndNormalisedImplicitly) {
  // 90° about z, scaled by 3: (x, y, z, w) = 3 · (0, 0, sin 45°, cos 45°).
  const float s = 3.0f * static_cast<float>(std::sqrt(0.5));
  const float enc[9] = {0, 0, 0, 0, 0, s, s, 1.0f, 1.0f};
  const CameraPose p = decode_pose(enc, 10, 10);
  const double want[3][4] = {{0, -1, 0, 0}, {1, 0, 0, 0}, {0, 0, 1, 0}};
  expect_matrix(p.c2w, want, 1e-6);
  // 180° about x: (1, 0, 0, 0).
  const float flip[9] = {0, 0, 0, 1, 0, 0, 0, 1.0f, 1.0f};
  const double want_flip[3][4] = {{1, 0, 0, 0}, {0, -1, 0, 0}, {0, 0, -1, 0}};
  expect_matrix(decode_pose(flip, 10, 10).c2w, want_flip, 0);
}

TEST(Pose, CameraToWorldTimesInverseIsIdentity) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-2.0f, 2.0f);
  for (int trial = 0; trial < 50; ++trial) {
    const float enc[9] = {u(rng), u(rng), u(rng), u(rng), u(rng), u(rng), u(rng), 1.0f, 1.0f};
    const CameraPose p = decode_pose(enc, 378, 504);
    for (int a = 0; a < 3; ++a) {
      for (int b = 0; b < 4; ++b) {
        // (c2w · w2c) in homogeneous form, rows 0..2.
        double v = b == 3 ? p.c2w[a][3] : 0.0;
        for (int k = 0; k < 3; ++k) v += p.c2w[a][k] * p.w2c[k][b];
        EXPECT_NEAR(v, a == b ? 1.0 : 0.0, 1e-5) << "trial " << trial;
      }
    }
  }
}

TEST(Pose, IntrinsicsFromFieldOfView) {
  const float fov_h = 0.9f, fov_w = 1.1f;
  const float enc[9] = {0, 0, 0, 0, 0, 0, 1, fov_h, fov_w};
  const CameraPose p = decode_pose(enc, 378, 504);
  EXPECT_NEAR(p.K[0][0], 252.0 / std::tan(fov_w / 2.0), 1e-3);
  EXPECT_NEAR(p.K[1][1], 189.0 / std::tan(fov_h / 2.0), 1e-3);
  EXPECT_EQ(p.K[0][2], 252.0f);
  EXPECT_EQ(p.K[1][2], 189.0f);
  EXPECT_EQ(p.K[2][2], 1.0f);
  EXPECT_EQ(p.K[0][1], 0.0f);
  EXPECT_EQ(p.K[1][0], 0.0f);
  EXPECT_EQ(p.K[2][0], 0.0f);
  EXPECT_EQ(p.K[2][1], 0.0f);
  // A 90° field of view puts the focal length at half the image size.
  const float right[9] = {
      0, 0, 0, 0, 0, 0, 1, static_cast<float>(kPi / 2), static_cast<float>(kPi / 2)};
  EXPECT_NEAR(decode_pose(right, 100, 200).K[0][0], 100.0, 1e-4);
  EXPECT_NEAR(decode_pose(right, 100, 200).K[1][1], 50.0, 1e-4);
}

TEST(Pose, EncodeDecodeRoundTrip) {
  std::mt19937 rng(11);
  std::normal_distribution<float> n(0.0f, 1.0f);
  std::uniform_real_distribution<float> fov(0.3f, 2.5f);
  for (int trial = 0; trial < 200; ++trial) {
    float q[4] = {n(rng), n(rng), n(rng), n(rng)};
    const float len = std::sqrt(q[0] * q[0] + q[1] * q[1] + q[2] * q[2] + q[3] * q[3]);
    const float sign = q[3] < 0 ? -1.0f : 1.0f;  // encode picks w >= 0
    const float enc[9] = {n(rng),
                          n(rng),
                          n(rng),
                          sign * q[0] / len,
                          sign * q[1] / len,
                          sign * q[2] / len,
                          sign * q[3] / len,
                          fov(rng),
                          fov(rng)};
    float back[9];
    encode_pose(decode_pose(enc, 294, 518), 294, 518, back);
    for (int i = 0; i < 9; ++i)
      EXPECT_NEAR(back[i], enc[i], 2e-5) << "trial " << trial << " i " << i;
  }
}

TEST(Pose, EncodeFlipsToNonNegativeW) {
  // -q and q are the same rotation; encoding returns the w >= 0 one.
  const float h = static_cast<float>(std::sqrt(0.5));
  const float enc[9] = {0, 0, 0, 0, -h, 0, -h, 1.0f, 1.0f};
  float back[9];
  encode_pose(decode_pose(enc, 10, 10), 10, 10, back);
  EXPECT_NEAR(back[4], h, 1e-6);
  EXPECT_NEAR(back[6], h, 1e-6);
}

}  // namespace
}  // namespace lingbot
