// Built instead of alignment.cpp, plot.cpp and point_cloud_metrics.cpp where Eigen or nanoflann
// was not found: reading and the metrics that need neither still work, these say what is missing.
#include "lingbot/error.h"
#include "lingbot/eval.h"

namespace lingbot::eval {
namespace {

[[noreturn]] void missing(const char* what) {
  throw Error(std::string(what) +
              " is not in this build: it needs Eigen and nanoflann (libeigen3-dev, "
              "libnanoflann-dev) when it is configured");
}

}  // namespace

bool available() {
  return false;
}

Similarity umeyama(const std::vector<std::array<double, 3>>&,
                   const std::vector<std::array<double, 3>>&, bool) {
  missing("trajectory alignment");
}

PointCloudReport evaluate_point_cloud(const PointCloud&, const PointCloud&, double) {
  missing("point-cloud evaluation");
}

void plot_trajectories(const std::string&, const std::vector<std::array<double, 3>>&,
                       const std::vector<std::vector<std::array<double, 3>>>&, int, int) {
  missing("the trajectory plot");
}

}  // namespace lingbot::eval
