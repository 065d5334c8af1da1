// Accuracy, completeness and F1 of a point cloud against a reference (definitions in
// lingbot/eval.h), nearest neighbours through nanoflann's k-d tree.
#include <cmath>
#include <nanoflann.hpp>

#include "eval/statistics.h"
#include "lingbot/error.h"
#include "lingbot/eval.h"

namespace lingbot::eval {
namespace {

// nanoflann reads the points through this adaptor, in place.
struct Cloud {
  const std::vector<double>& xyz;
  size_t kdtree_get_point_count() const { return xyz.size() / 3; }
  double kdtree_get_pt(size_t i, size_t d) const { return xyz[3 * i + d]; }
  template <class Box>
  bool kdtree_get_bbox(Box&) const {
    return false;
  }
};

using Tree = nanoflann::KDTreeSingleIndexAdaptor<nanoflann::L2_Simple_Adaptor<double, Cloud>, Cloud,
                                                 3, uint32_t>;

// The distance from each point of `from` to its nearest point of `to`.
std::vector<double> nearest(const PointCloud& from, const PointCloud& to) {
  const Cloud cloud{to.xyz};
  Tree tree(3, cloud, nanoflann::KDTreeSingleIndexAdaptorParams(16));
  std::vector<double> d(from.size());
#pragma omp parallel for schedule(static)
  for (size_t i = 0; i < from.size(); ++i) {
    uint32_t index = 0;
    double sq = 0;
    tree.knnSearch(&from.xyz[3 * i], 1, &index, &sq);
    d[i] = std::sqrt(sq);
  }
  return d;
}

}  // namespace

PointCloudReport evaluate_point_cloud(const PointCloud& pred, const PointCloud& ref,
                                      double threshold) {
  LINGBOT_CHECK_ARG(threshold > 0 && std::isfinite(threshold),
                    "the F1 threshold must be > 0, got " + std::to_string(threshold));
  LINGBOT_CHECK_ARG(pred.size() > 0, "the predicted point cloud " + pred.name + " is empty");
  LINGBOT_CHECK_ARG(ref.size() > 0, "the reference point cloud " + ref.name + " is empty");
  LINGBOT_CHECK_ARG(pred.size() < (size_t(1) << 32) && ref.size() < (size_t(1) << 32),
                    "point clouds of 2^32 points or more");
  std::vector<double> acc = nearest(pred, ref), comp = nearest(ref, pred);
  PointCloudReport r;
  r.threshold = threshold;
  r.predicted_points = pred.size();
  r.reference_points = ref.size();
  const auto mean = [](const std::vector<double>& v) {
    double s = 0;
    for (double x : v) s += x;
    return s / static_cast<double>(v.size());
  };
  const auto below = [&](const std::vector<double>& v) {
    size_t n = 0;
    for (double x : v) n += x < threshold;
    return static_cast<double>(n) / static_cast<double>(v.size());
  };
  r.accuracy = mean(acc);
  r.completeness = mean(comp);
  r.chamfer = (r.accuracy + r.completeness) / 2;
  r.precision = below(acc);
  r.recall = below(comp);
  r.f1 = r.precision + r.recall > 0 ? 2 * r.precision * r.recall / (r.precision + r.recall) : 0;
  r.accuracy_median = median_of(acc);
  r.completeness_median = median_of(comp);
  return r;
}

}  // namespace lingbot::eval
