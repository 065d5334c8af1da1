// Local features and two-view verification for loop detection (src/loop/features_opencv.cpp
// with OpenCV, src/loop/features_none.cpp without: every call then throws).
#pragma once

#include <cstdint>
#include <vector>

#include "lingbot/loop.h"

namespace lingbot::loop {

// A grey image, row-major, one byte a pixel.
struct Gray {
  int height = 0, width = 0;
  std::vector<uint8_t> pixels;
};
// F32 [3, H, W] in [0, 1] or U8 [H, W, 3] -> grey (ITU-R BT.601 weights).
Gray to_gray(const Tensor& image);

// ORB keypoints (x, y) and their 32-byte binary descriptors.
struct Features {
  std::vector<float> xy;        // [n, 2]
  std::vector<uint8_t> binary;  // [n, 32]
  int count() const { return static_cast<int>(xy.size() / 2); }
  size_t bytes() const { return xy.size() * sizeof(float) + binary.size(); }
};

bool available();
Features extract(const Gray& image, const LoopOptions& options);
// Matches a to b (mutual nearest neighbours passing the ratio test both ways) and fits a
// fundamental matrix with RANSAC.
PairVerification verify(const Features& a, const Features& b, const LoopOptions& options);

// The relative pose the essential matrix of two views gives: E = K_b^T F K_a from the verified
// fundamental matrix (x_b^T F x_a = 0, pixels) and the intrinsics (row-major 3x3), decomposed
// with the inliers deciding which of its four poses puts the points in front of both cameras.
// R (row-major) and unit t map a's camera coordinates to b's: x_b ~ R x_a + t. False when no pose
// puts enough of the inliers in front (a degenerate F).
bool essential_pose(const std::array<double, 9>& fundamental, const std::array<float, 9>& k_a,
                    const std::array<float, 9>& k_b,
                    const std::vector<std::array<float, 4>>& inliers, std::array<double, 9>& r,
                    std::array<double, 3>& t);

}  // namespace lingbot::loop
