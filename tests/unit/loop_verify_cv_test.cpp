// Geometric verification of loop candidates on image pairs with a known answer: a textured
// picture and its warp by a known homography (accepted, and every inlier maps through the
// homography), two unrelated pictures (rejected), and real photographs: a revisit of the office
// loop (accepted) and a street of the Oxford walk against the office (rejected). Built only
// where OpenCV is (the pictures are drawn with it); the library's check is the code under test.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <opencv2/core.hpp>
#include <opencv2/imgproc.hpp>
#include <random>
#include <vector>

#include "lingbot/error.h"
#include "lingbot/image.h"
#include "lingbot/loop.h"
#include "test_util.h"

namespace lingbot {
namespace {

constexpr int kW = 518, kH = 378;

// Random rectangles, ellipses and lines of random greys on a random-grey background, lightly
// blurred: corners and edges at every scale, as a textured scene has.
cv::Mat textured(uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> grey(0, 255), x(0, kW), y(0, kH), size(4, 60);
  cv::Mat img(kH, kW, CV_8UC3, cv::Scalar::all(grey(rng)));
  for (int i = 0; i < 600; ++i) {
    const cv::Scalar c(grey(rng), grey(rng), grey(rng));
    const cv::Point p(x(rng), y(rng));
    switch (i % 3) {
      case 0:
        cv::rectangle(img, p, p + cv::Point(size(rng), size(rng)), c, cv::FILLED);
        break;
      case 1:
        cv::ellipse(img, p, cv::Size(size(rng) / 2, size(rng) / 2), grey(rng), 0, 360, c,
                    cv::FILLED);
        break;
      default:
        cv::line(img, p, cv::Point(x(rng), y(rng)), c, 2);
    }
  }
  cv::GaussianBlur(img, img, cv::Size(3, 3), 0.8);
  return img;
}

// U8 [H, W, 3] as the library takes it.
Tensor to_tensor(const cv::Mat& m) {
  Tensor t = Tensor::zeros({m.rows, m.cols, 3}, DType::U8);
  std::memcpy(t.raw(), m.data, m.total() * 3);
  return t;
}

// A rotation of 8 degrees with scale 0.9 about the centre, a shift, and a mild perspective.
cv::Matx33d known_homography() {
  const double a = 8 * M_PI / 180, s = 0.9, cx = kW / 2.0, cy = kH / 2.0;
  const cv::Matx33d to_origin(1, 0, -cx, 0, 1, -cy, 0, 0, 1);
  const cv::Matx33d rot(s * std::cos(a), -s * std::sin(a), 0, s * std::sin(a), s * std::cos(a), 0,
                        0, 0, 1);
  const cv::Matx33d back(1, 0, cx + 12, 0, 1, cy - 7, 0, 0, 1);
  const cv::Matx33d persp(1, 0, 0, 0, 1, 0, 2e-4, -1e-4, 1);
  return back * rot * persp * to_origin;
}

TEST(LoopVerify, WarpedPictureIsAcceptedAndItsInliersFollowTheHomography) {
  if (!loop_detection_available()) GTEST_SKIP() << "built without OpenCV";
  const cv::Mat a = textured(7);
  const cv::Matx33d H = known_homography();
  cv::Mat b;
  cv::warpPerspective(a, b, cv::Mat(H), a.size(), cv::INTER_LINEAR, cv::BORDER_CONSTANT,
                      cv::Scalar::all(128));
  const LoopOptions o;
  const PairVerification v = verify_pair(to_tensor(a), to_tensor(b), o);
  EXPECT_TRUE(v.accepted) << v.inliers << " inliers of " << v.matches;
  EXPECT_GE(v.inliers, 4 * o.min_inliers);
  EXPECT_GE(v.inlier_ratio, 0.8f);
  ASSERT_EQ(static_cast<int>(v.inlier_points.size()), v.inliers);
  // Each inlier is a true correspondence: b = H a to within the features' localisation.
  int near = 0;
  for (const auto& p : v.inlier_points) {
    const cv::Vec3d q = H * cv::Vec3d(p[0], p[1], 1);
    const double dx = q[0] / q[2] - p[2], dy = q[1] / q[2] - p[3];
    near += std::hypot(dx, dy) < 3.0;
  }
  EXPECT_GE(near, static_cast<int>(0.95 * v.inliers)) << near << " of " << v.inliers;
  // And the fundamental matrix holds for them: x_b^T F x_a ~ 0, as a distance to the line.
  const auto& F = v.fundamental;
  for (const auto& p : v.inlier_points) {
    const double l0 = F[0] * p[0] + F[1] * p[1] + F[2];
    const double l1 = F[3] * p[0] + F[4] * p[1] + F[5];
    const double l2 = F[6] * p[0] + F[7] * p[1] + F[8];
    EXPECT_LT(std::fabs(l0 * p[2] + l1 * p[3] + l2) / std::hypot(l0, l1), 2.0 * o.ransac_px);
  }
}

TEST(LoopVerify, UnrelatedPicturesAreRejected) {
  if (!loop_detection_available()) GTEST_SKIP() << "built without OpenCV";
  const LoopOptions o;
  for (uint32_t seed : {11u, 12u, 13u}) {
    const PairVerification v =
        verify_pair(to_tensor(textured(seed)), to_tensor(textured(seed + 100)), o);
    EXPECT_FALSE(v.accepted) << "seeds " << seed << ", " << seed + 100 << ": " << v.inliers
                             << " inliers of " << v.matches;
    EXPECT_LT(v.inliers, o.min_inliers / 2);
  }
}

TEST(LoopVerify, BadImagesAreOneClearError) {
  const Tensor flat = Tensor::zeros({kH, kW});
  EXPECT_THROW(verify_pair(flat, flat), Error);
}

// The model input of a real photograph, as `run` makes it (crop to width 518).
Tensor real_frame(const std::string& rel) {
  const std::string path = test::fixtures_dir() + "/real/" + rel;
  if (!std::filesystem::exists(path)) return {};
  return to_float01(preprocess(load_image(path), PreprocessMode::Crop, 518));
}

TEST(LoopVerify, RealRevisitIsAcceptedAndAnotherPlaceRejected) {
  if (!loop_detection_available()) GTEST_SKIP() << "built without OpenCV";
  const Tensor start = real_frame("loop/000010.png"), back = real_frame("loop/000234.png");
  const Tensor street = real_frame("oxford/000100.png");
  if (!start.defined() || !back.defined() || !street.defined()) GTEST_SKIP() << "no real/ fixtures";
  const LoopOptions o;
  const PairVerification same = verify_pair(back, start, o);
  EXPECT_TRUE(same.accepted) << same.inliers << " inliers of " << same.matches;
  for (const Tensor* other : {&start, &back}) {
    const PairVerification v = verify_pair(street, *other, o);
    EXPECT_FALSE(v.accepted) << v.inliers << " inliers of " << v.matches;
    EXPECT_LT(v.inliers, o.min_inliers / 2);
  }
}

}  // namespace
}  // namespace lingbot
