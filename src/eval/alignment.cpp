// Umeyama's least-squares similarity between two point sets, on Eigen's SVD.
#include <Eigen/Dense>
#include <cmath>

#include "lingbot/error.h"
#include "lingbot/eval.h"

namespace lingbot::eval {

bool available() {
  return true;
}

Similarity umeyama(const std::vector<std::array<double, 3>>& from,
                   const std::vector<std::array<double, 3>>& to, bool with_scale) {
  LINGBOT_CHECK_ARG(from.size() == to.size(), "umeyama: " + std::to_string(from.size()) +
                                                  " points against " + std::to_string(to.size()));
  const size_t need = with_scale ? 3 : 2;
  LINGBOT_CHECK_ARG(from.size() >= need, std::string(with_scale ? "Sim(3)" : "SE(3)") +
                                             " alignment needs at least " + std::to_string(need) +
                                             " point pairs, got " + std::to_string(from.size()));
  const auto n = static_cast<Eigen::Index>(from.size());
  Eigen::Matrix<double, 3, Eigen::Dynamic> x(3, n), y(3, n);
  for (Eigen::Index i = 0; i < n; ++i) {
    x.col(i) = Eigen::Vector3d(from[i][0], from[i][1], from[i][2]);
    y.col(i) = Eigen::Vector3d(to[i][0], to[i][1], to[i][2]);
  }
  const Eigen::Vector3d mx = x.rowwise().mean(), my = y.rowwise().mean();
  const Eigen::Matrix<double, 3, Eigen::Dynamic> xc = x.colwise() - mx, yc = y.colwise() - my;
  // sigma_x^2 (the variance of the source, eq. 36 of the paper) and the cross-covariance (38).
  const double var_x = xc.squaredNorm() / static_cast<double>(n);
  LINGBOT_CHECK(var_x > 0, "the estimated positions are all one point: no alignment exists");
  const Eigen::Matrix3d cov = yc * xc.transpose() / static_cast<double>(n);
  Eigen::JacobiSVD<Eigen::Matrix3d> svd(cov, Eigen::ComputeFullU | Eigen::ComputeFullV);
  Eigen::Matrix3d s = Eigen::Matrix3d::Identity();
  // A reflection would fit better than any rotation; S flips the smallest singular direction
  // (eq. 39, in the determinant form evo uses).
  if (svd.matrixU().determinant() * svd.matrixV().determinant() < 0) s(2, 2) = -1;
  const Eigen::Matrix3d r = svd.matrixU() * s * svd.matrixV().transpose();
  const double c =
      with_scale ? (svd.singularValues().asDiagonal() * s).trace() / var_x : 1.0;  // eq. 42
  const Eigen::Vector3d t = my - c * r * mx;                                       // eq. 41
  Similarity out;
  out.scale = c;
  for (int i = 0; i < 3; ++i) {
    for (int j = 0; j < 3; ++j) out.rotation[3 * i + j] = r(i, j);
    out.translation[i] = t(i);
  }
  return out;
}

}  // namespace lingbot::eval
