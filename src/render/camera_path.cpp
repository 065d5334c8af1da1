#include "render/camera_path.h"

#include <algorithm>
#include <cmath>

namespace lingbot::render {
namespace {

// Gaussian-weighted average of `v` around each index (edges renormalised), so that a shaky
// hand-held trajectory gives a steady follow camera.
std::vector<Vec3> smooth(const std::vector<Vec3>& v, double sigma) {
  const int64_t n = static_cast<int64_t>(v.size()), half = static_cast<int64_t>(3 * sigma);
  std::vector<Vec3> out(v.size());
  for (int64_t i = 0; i < n; ++i) {
    Vec3 sum{0, 0, 0};
    float total = 0;
    for (int64_t j = std::max<int64_t>(0, i - half); j <= std::min(n - 1, i + half); ++j) {
      const float w = static_cast<float>(std::exp(-0.5 * (i - j) * (i - j) / (sigma * sigma)));
      sum = sum + v[j] * w;
      total += w;
    }
    out[i] = sum * (1 / total);
  }
  return out;
}

Vec3 lerp(const std::vector<Vec3>& v, double s) {
  const double c = std::clamp(s, 0.0, static_cast<double>(v.size() - 1));
  const size_t i = static_cast<size_t>(std::floor(c));
  const size_t j = std::min(i + 1, v.size() - 1);
  const float f = static_cast<float>(c - i);
  return v[i] * (1 - f) + v[j] * f;
}

}  // namespace

void set_bounds(Scene& s, const std::vector<float>& xyz) {
  const size_t n = xyz.size() / 3;
  for (int k = 0; k < 3; ++k) {
    float lo = INFINITY, hi = -INFINITY;
    if (n > 0) {
      std::vector<float> axis(n);
      for (size_t i = 0; i < n; ++i) axis[i] = xyz[3 * i + k];
      const size_t a = n / 50, b = n - 1 - n / 50;
      std::nth_element(axis.begin(), axis.begin() + a, axis.end());
      lo = axis[a];
      std::nth_element(axis.begin(), axis.begin() + b, axis.end());
      hi = axis[b];
    }
    for (const Vec3& c : s.centres) lo = std::min(lo, c[k]), hi = std::max(hi, c[k]);
    if (!(lo <= hi)) lo = hi = 0;
    const float grow = std::max(0.0f, 0.1f * s.depth - (hi - lo)) / 2;
    s.lo[k] = lo - grow;
    s.hi[k] = hi + grow;
  }
}

CameraPlan::CameraPlan(Scene scene, CameraPath path, int width, int height, float fov_y,
                       double step)
    : scene_(std::move(scene)), path_(path), width_(width), height_(height), fov_y_(fov_y) {
  if (!(scene_.depth > 0) || !std::isfinite(scene_.depth)) scene_.depth = 1;
  if (scene_.centres.empty())
    scene_.centres.push_back({0, 0, 0}), scene_.forwards.push_back({0, 0, 1});
  const Scene& s = scene_;
  const Vec3 mid = (s.lo + s.hi) * 0.5f, size = s.hi - s.lo;
  const float aspect = static_cast<float>(width) / static_cast<float>(height);
  const float tan_y = std::tan(0.5f * fov_y), tan_x = tan_y * aspect;
  switch (path) {
    case CameraPath::Follow:
      centres_ = smooth(s.centres, std::max(kSmoothFrames, 1.5 * step));
      forwards_ = smooth(s.forwards, std::max(kSmoothFrames, 1.5 * step));
      break;
    case CameraPath::Birdeye: {
      // Straight down (-up is +y), the first camera's forward (+z) at the top of the picture;
      // far enough that the box's x extent fits across and its z extent from top to bottom, with a
      // margin.
      const float dist = 1.3f * std::max(0.5f * size[0] / tan_x, 0.5f * size[2] / tan_y);
      const Vec3 eye{mid[0], s.lo[1] - dist, mid[2]};
      fixed_ = View::look_at(eye, eye + Vec3{0, 1, 0}, {0, 0, 1}, width, height, fov_y);
      break;
    }
    case CameraPath::Static: {
      // From behind the cameras' average heading and 35 degrees above, at the distance where
      // the box's bounding sphere fits the narrower field of view.
      Vec3 heading{0, 0, 0};
      for (const Vec3& f : s.forwards) heading = heading + f;
      heading = heading - kWorldUp * dot(heading, kWorldUp);
      heading = normalized(heading, {0, 0, 1});
      const float elevation = 35.0f * static_cast<float>(M_PI) / 180.0f;
      const Vec3 dir =
          normalized(heading * -std::cos(elevation) + kWorldUp * std::sin(elevation), {0, -1, 0});
      const float radius = 0.5f * norm(size);
      const float dist = radius / std::sin(std::atan(std::min(tan_x, tan_y)));
      fixed_ = View::look_at(mid + dir * dist, mid, kWorldUp, width, height, fov_y);
      break;
    }
  }
  fixed_.near = 1e-3f * s.depth;
}

View CameraPlan::at(double position) const {
  if (path_ != CameraPath::Follow) return fixed_;
  const float d = scene_.depth;
  const Vec3 c = lerp(centres_, position);
  const Vec3 f = normalized(lerp(forwards_, position), {0, 0, 1});
  const Vec3 eye = c - f * (kBehind * d) + kWorldUp * (kAbove * d);
  View v = View::look_at(eye, c + f * (kAhead * d), kWorldUp, width_, height_, fov_y_);
  v.near = 1e-3f * d;
  return v;
}

}  // namespace lingbot::render
