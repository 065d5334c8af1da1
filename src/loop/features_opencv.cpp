// Loop detection's local features and two-view check on OpenCV: ORB (fast, binary, rotation
// aware; no patent or extra module), brute-force Hamming matching with Lowe's ratio test kept
// only where it holds both ways, and a RANSAC fundamental matrix. The only file that includes
// OpenCV, so its headers and definitions stay out of the rest of the library.
#include <opencv2/calib3d.hpp>
#include <opencv2/core.hpp>
#include <opencv2/features2d.hpp>

#include "loop/features.h"

namespace lingbot::loop {

bool available() {
  return true;
}

namespace {
// The detector runs beside the stream, whose threads it should not take: OpenCV on one thread.
void one_thread() {
  static const bool once = [] {
    cv::setNumThreads(1);
    return true;
  }();
  (void)once;
}
}  // namespace

Features extract(const Gray& image, const LoopOptions& o) {
  Features f;
  if (image.height <= 0 || image.width <= 0) return f;
  const cv::Mat gray(image.height, image.width, CV_8UC1, const_cast<uint8_t*>(image.pixels.data()));
  one_thread();
  cv::Ptr<cv::ORB> orb = cv::ORB::create(std::max(o.max_features, 8));
  std::vector<cv::KeyPoint> keypoints;
  cv::Mat binary;
  orb->detectAndCompute(gray, cv::noArray(), keypoints, binary);
  if (keypoints.empty() || binary.empty()) return f;
  f.xy.reserve(keypoints.size() * 2);
  for (const cv::KeyPoint& k : keypoints) {
    f.xy.push_back(k.pt.x);
    f.xy.push_back(k.pt.y);
  }
  f.binary.assign(binary.data, binary.data + binary.total() * binary.elemSize());
  return f;
}

namespace {

cv::Mat binary_mat(const Features& f) {
  return cv::Mat(f.count(), 32, CV_8UC1, const_cast<uint8_t*>(f.binary.data()));
}

// For each row of `from`, the index of its match in `to` where the nearest neighbour is clearly
// nearer than the second (Lowe's ratio), else -1.
std::vector<int> ratio_matches(const cv::Mat& from, const cv::Mat& to, float ratio) {
  std::vector<int> best(from.rows, -1);
  if (from.empty() || to.rows < 2) return best;
  cv::BFMatcher matcher(cv::NORM_HAMMING);
  std::vector<std::vector<cv::DMatch>> knn;
  matcher.knnMatch(from, to, knn, 2);
  for (const auto& m : knn)
    if (m.size() == 2 && m[0].distance < ratio * m[1].distance) best[m[0].queryIdx] = m[0].trainIdx;
  return best;
}

}  // namespace

PairVerification verify(const Features& a, const Features& b, const LoopOptions& o) {
  PairVerification v;
  v.keypoints_a = a.count();
  v.keypoints_b = b.count();
  one_thread();
  const cv::Mat da = binary_mat(a), db = binary_mat(b);
  const std::vector<int> ab = ratio_matches(da, db, o.ratio), ba = ratio_matches(db, da, o.ratio);
  std::vector<cv::Point2f> pa, pb;
  std::vector<std::array<int, 2>> index;
  for (int i = 0; i < a.count(); ++i) {
    const int j = ab[i];
    if (j < 0 || ba[j] != i) continue;  // mutual: a repeated texture matches neither way
    pa.emplace_back(a.xy[2 * i], a.xy[2 * i + 1]);
    pb.emplace_back(b.xy[2 * j], b.xy[2 * j + 1]);
    index.push_back({i, j});
  }
  v.matches = static_cast<int>(pa.size());
  // Eight correspondences at least: fewer leave the RANSAC model unconstrained.
  if (v.matches < 8) return v;
  std::vector<uchar> mask;
  const cv::Mat F = cv::findFundamentalMat(pa, pb, cv::FM_RANSAC, o.ransac_px, 0.999, 2000, mask);
  if (F.rows != 3 || F.cols != 3) return v;
  for (int r = 0; r < 3; ++r)
    for (int c = 0; c < 3; ++c) v.fundamental[r * 3 + c] = F.at<double>(r, c);
  for (size_t i = 0; i < mask.size(); ++i)
    if (mask[i]) {
      v.inlier_points.push_back({pa[i].x, pa[i].y, pb[i].x, pb[i].y});
      v.inlier_keypoints.push_back(index[i]);
    }
  v.inliers = static_cast<int>(v.inlier_points.size());
  v.inlier_ratio = static_cast<float>(v.inliers) / static_cast<float>(v.matches);
  v.accepted = v.inliers >= o.min_inliers && v.inlier_ratio >= o.min_inlier_ratio;
  return v;
}

bool essential_pose(const std::array<double, 9>& fundamental, const std::array<float, 9>& k_a,
                    const std::array<float, 9>& k_b,
                    const std::vector<std::array<float, 4>>& inliers, std::array<double, 9>& r,
                    std::array<double, 3>& t) {
  if (inliers.size() < 5) return false;
  one_thread();
  const cv::Matx33d F(fundamental.data());
  cv::Matx33d ka, kb;
  for (int i = 0; i < 9; ++i) {
    ka.val[i] = k_a[i];
    kb.val[i] = k_b[i];
  }
  // In normalised coordinates (each view its own intrinsics), so that recoverPose's single
  // camera matrix is the identity.
  const cv::Matx33d E = kb.t() * F * ka;
  const cv::Matx33d ia = ka.inv(), ib = kb.inv();
  std::vector<cv::Point2d> na, nb;
  for (const auto& p : inliers) {
    const cv::Vec3d qa = ia * cv::Vec3d(p[0], p[1], 1), qb = ib * cv::Vec3d(p[2], p[3], 1);
    na.emplace_back(qa[0] / qa[2], qa[1] / qa[2]);
    nb.emplace_back(qb[0] / qb[2], qb[1] / qb[2]);
  }
  cv::Mat R, T;
  const int in_front = cv::recoverPose(cv::Mat(E), na, nb, R, T, 1.0, cv::Point2d(0, 0));
  // Most inliers in front of both cameras, as for any real pair of views.
  if (in_front < static_cast<int>(inliers.size()) / 2) return false;
  for (int i = 0; i < 9; ++i) r[i] = R.at<double>(i / 3, i % 3);
  for (int i = 0; i < 3; ++i) t[i] = T.at<double>(i, 0);
  return true;
}

}  // namespace lingbot::loop
