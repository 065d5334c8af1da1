// The renderer's virtual camera: a pinhole looking from `eye` along `forward`, with OpenCV axes
// as the run's cameras (x right, y down, z forward), and the small vector algebra around it.
#pragma once

#include <array>
#include <cmath>

namespace lingbot::render {

using Vec3 = std::array<float, 3>;

inline Vec3 operator+(Vec3 a, Vec3 b) {
  return {a[0] + b[0], a[1] + b[1], a[2] + b[2]};
}
inline Vec3 operator-(Vec3 a, Vec3 b) {
  return {a[0] - b[0], a[1] - b[1], a[2] - b[2]};
}
inline Vec3 operator*(Vec3 a, float s) {
  return {a[0] * s, a[1] * s, a[2] * s};
}
inline float dot(Vec3 a, Vec3 b) {
  return a[0] * b[0] + a[1] * b[1] + a[2] * b[2];
}
inline Vec3 cross(Vec3 a, Vec3 b) {
  return {a[1] * b[2] - a[2] * b[1], a[2] * b[0] - a[0] * b[2], a[0] * b[1] - a[1] * b[0]};
}
inline float norm(Vec3 a) {
  return std::sqrt(dot(a, a));
}
// a / |a|, or `fallback` when a is (nearly) zero or not finite.
inline Vec3 normalized(Vec3 a, Vec3 fallback) {
  const float n = norm(a);
  return n > 1e-12f && std::isfinite(n) ? a * (1 / n) : fallback;
}

// "Up" in the world: the first camera's -y (its frame is the world's).
inline constexpr Vec3 kWorldUp = {0, -1, 0};

// A point in the view's pixels: (u, v) with pixel (i, j) covering [i, i+1) x [j, j+1), and the
// depth along the view's z axis.
struct Projected {
  float u, v, z;
};

struct View {
  Vec3 eye{0, 0, 0};
  Vec3 right{1, 0, 0}, down{0, 1, 0}, forward{0, 0, 1};  // rows of the world-to-view rotation
  float focal = 1, cx = 0, cy = 0;                       // pixels; fx = fy
  int width = 0, height = 0;
  float near = 1e-3f;  // nothing nearer than this is drawn

  // Looking from `eye` at `target`; `up` need only be roughly up (a forward parallel to it falls
  // back to the world's z). Vertical field of view `fov_y` radians.
  static View look_at(Vec3 eye, Vec3 target, Vec3 up, int width, int height, float fov_y);

  Vec3 to_view(Vec3 p) const {
    const Vec3 d = p - eye;
    return {dot(right, d), dot(down, d), dot(forward, d)};
  }
  Projected project_view(Vec3 q) const {
    return {focal * q[0] / q[2] + cx, focal * q[1] / q[2] + cy, q[2]};
  }
};

}  // namespace lingbot::render
