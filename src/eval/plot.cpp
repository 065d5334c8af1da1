// A top view of trajectories as a PNG: the reference dashed in grey, aligned estimates solid,
// anti-aliased, on the plane of the reference's two largest principal axes.
#include <Eigen/Dense>
#include <algorithm>
#include <cmath>

#include "lingbot/error.h"
#include "lingbot/eval.h"
#include "lingbot/image.h"

namespace lingbot::eval {
namespace {

using Rgb = std::array<uint8_t, 3>;

struct Canvas {
  int w, h;
  std::vector<uint8_t> rgb;
  Canvas(int w, int h) : w(w), h(h), rgb(size_t(w) * h * 3, 255) {}

  void blend(int x, int y, const Rgb& c, double a) {
    if (x < 0 || y < 0 || x >= w || y >= h || a <= 0) return;
    uint8_t* p = &rgb[(size_t(y) * w + x) * 3];
    for (int k = 0; k < 3; ++k) p[k] = static_cast<uint8_t>(std::lround(p[k] + a * (c[k] - p[k])));
  }

  // A segment `radius` px wide each side, its coverage from the distance to the segment.
  void line(double x0, double y0, double x1, double y1, double radius, const Rgb& c) {
    const int xa = static_cast<int>(std::floor(std::min(x0, x1) - radius - 1));
    const int xb = static_cast<int>(std::ceil(std::max(x0, x1) + radius + 1));
    const int ya = static_cast<int>(std::floor(std::min(y0, y1) - radius - 1));
    const int yb = static_cast<int>(std::ceil(std::max(y0, y1) + radius + 1));
    const double dx = x1 - x0, dy = y1 - y0, len2 = dx * dx + dy * dy;
    for (int y = std::max(ya, 0); y <= std::min(yb, h - 1); ++y)
      for (int x = std::max(xa, 0); x <= std::min(xb, w - 1); ++x) {
        double t = len2 > 0 ? ((x - x0) * dx + (y - y0) * dy) / len2 : 0;
        t = std::clamp(t, 0.0, 1.0);
        const double ex = x - (x0 + t * dx), ey = y - (y0 + t * dy);
        const double d = std::sqrt(ex * ex + ey * ey);
        blend(x, y, c, std::clamp(radius + 0.5 - d, 0.0, 1.0));
      }
  }
};

}  // namespace

void plot_trajectories(const std::string& png_path,
                       const std::vector<std::array<double, 3>>& reference,
                       const std::vector<std::vector<std::array<double, 3>>>& estimates, int width,
                       int height) {
  LINGBOT_CHECK_ARG(width >= 64 && height >= 64 && width <= 8192 && height <= 8192,
                    "plot size: 64 to 8192 pixels a side");
  // The plane: the reference's principal axes (or the first estimate's without one).
  const auto& basis_points = reference.size() >= 2 || estimates.empty() ? reference : estimates[0];
  LINGBOT_CHECK_ARG(basis_points.size() >= 2, "a plot needs at least two positions");
  Eigen::Vector3d mean = Eigen::Vector3d::Zero();
  for (const auto& p : basis_points) mean += Eigen::Vector3d(p[0], p[1], p[2]);
  mean /= static_cast<double>(basis_points.size());
  Eigen::Matrix3d cov = Eigen::Matrix3d::Zero();
  for (const auto& p : basis_points) {
    const Eigen::Vector3d d = Eigen::Vector3d(p[0], p[1], p[2]) - mean;
    cov += d * d.transpose();
  }
  Eigen::SelfAdjointEigenSolver<Eigen::Matrix3d> eig(cov);  // ascending eigenvalues
  const Eigen::Vector3d u = eig.eigenvectors().col(2), v = eig.eigenvectors().col(1);
  const auto project = [&](const std::array<double, 3>& p) {
    const Eigen::Vector3d d = Eigen::Vector3d(p[0], p[1], p[2]) - mean;
    return std::array<double, 2>{d.dot(u), d.dot(v)};
  };
  double lo[2] = {INFINITY, INFINITY}, hi[2] = {-INFINITY, -INFINITY};
  const auto extend = [&](const std::vector<std::array<double, 3>>& pts) {
    for (const auto& p : pts) {
      const auto q = project(p);
      for (int k = 0; k < 2; ++k) lo[k] = std::min(lo[k], q[k]), hi[k] = std::max(hi[k], q[k]);
    }
  };
  extend(reference);
  for (const auto& e : estimates) extend(e);
  const double margin = 0.06 * std::min(width, height);
  const double span = std::max({hi[0] - lo[0], hi[1] - lo[1], 1e-12});
  const double scale = std::min((width - 2 * margin) / std::max(hi[0] - lo[0], span * 1e-3),
                                (height - 2 * margin) / std::max(hi[1] - lo[1], span * 1e-3));
  const double cx = (lo[0] + hi[0]) / 2, cy = (lo[1] + hi[1]) / 2;
  const auto pixel = [&](const std::array<double, 3>& p) {
    const auto q = project(p);
    // Image rows grow downwards: the second axis is flipped so that the view is not mirrored.
    return std::array<double, 2>{width / 2.0 + (q[0] - cx) * scale,
                                 height / 2.0 - (q[1] - cy) * scale};
  };

  Canvas c(width, height);
  const double lw = std::max(1.0, std::min(width, height) / 400.0);
  // The estimates first, the reference dashed over them: where they agree, both show.
  static const Rgb colours[] = {{31, 119, 180}, {255, 127, 14}, {44, 160, 44}, {214, 39, 40}};
  for (size_t e = 0; e < estimates.size(); ++e) {
    const Rgb& col = colours[e % 4];
    const auto& pts = estimates[e];
    for (size_t i = 1; i < pts.size(); ++i) {
      const auto a = pixel(pts[i - 1]), b = pixel(pts[i]);
      c.line(a[0], a[1], b[0], b[1], lw, col);
    }
    if (!pts.empty()) {
      const auto a = pixel(pts[0]);
      c.line(a[0], a[1], a[0], a[1], 3 * lw, col);
    }
  }
  // The reference, dashed: 12 px drawn, 7 px left out, measured along the path.
  const Rgb grey{140, 140, 140};
  double along = 0;
  for (size_t i = 1; i < reference.size(); ++i) {
    const auto a = pixel(reference[i - 1]), b = pixel(reference[i]);
    const double len = std::hypot(b[0] - a[0], b[1] - a[1]);
    for (double s = 0; s < len;) {
      const double phase = std::fmod(along + s, 19.0);
      const double step = std::min(len - s, phase < 12 ? 12 - phase : 19 - phase);
      if (phase < 12) {
        const double t0 = s / len, t1 = (s + step) / len;
        c.line(a[0] + t0 * (b[0] - a[0]), a[1] + t0 * (b[1] - a[1]), a[0] + t1 * (b[0] - a[0]),
               a[1] + t1 * (b[1] - a[1]), lw, grey);
      }
      s += std::max(step, 1e-6);
    }
    along += len;
  }
  if (!reference.empty()) {
    const auto a = pixel(reference[0]);
    c.line(a[0], a[1], a[0], a[1], 3 * lw, grey);
  }
  ImageU8 img;
  img.width = width;
  img.height = height;
  img.rgb = std::move(c.rgb);
  write_png(png_path, img);
}

}  // namespace lingbot::eval
