#include "render/raster.h"

#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <limits>
#include <utility>

namespace lingbot::render {
namespace {

constexpr uint64_t kEmpty = std::numeric_limits<uint64_t>::max();

void atomic_min(uint64_t& slot, uint64_t value) {
  std::atomic_ref<uint64_t> a(slot);
  uint64_t old = a.load(std::memory_order_relaxed);
  while (value < old && !a.compare_exchange_weak(old, value, std::memory_order_relaxed)) {
  }
}

}  // namespace

Canvas::Canvas(int width, int height, Rgb background)
    : width_(width),
      height_(height),
      background_(background),
      zbuf_(static_cast<size_t>(width) * height, kEmpty) {}

void Canvas::draw_points(const View& view, const PointCloud& cloud, int64_t count,
                         float point_size) {
  const float w = static_cast<float>(width_), h = static_cast<float>(height_);
  const float* xyz = cloud.xyz.data();
  const uint8_t* rgb = cloud.rgb.data();
  const float* fp = cloud.footprint.data();
#pragma omp parallel for schedule(static, 4096)
  for (int64_t i = 0; i < count; ++i) {
    const Vec3 q = view.to_view({xyz[3 * i], xyz[3 * i + 1], xyz[3 * i + 2]});
    if (!(q[2] > view.near)) continue;
    const Projected p = view.project_view(q);
    const float d = std::clamp(point_size * fp[i] * view.focal / q[2], 1.0f, kMaxSplat);
    const float r = 0.5f * d;
    if (!(p.u > -r && p.u < w + r && p.v > -r && p.v < h + r)) continue;  // NaN too
    const uint64_t packed = static_cast<uint64_t>(std::bit_cast<uint32_t>(q[2])) << 32 |
                            uint64_t(rgb[3 * i]) << 16 | uint64_t(rgb[3 * i + 1]) << 8 |
                            rgb[3 * i + 2];
    if (d <= 1.5f) {  // a single pixel: the one the point falls in
      const int x = static_cast<int>(std::floor(p.u)), y = static_cast<int>(std::floor(p.v));
      if (x >= 0 && x < width_ && y >= 0 && y < height_)
        atomic_min(zbuf_[static_cast<size_t>(y) * width_ + x], packed);
      continue;
    }
    // Pixels whose centre lies in the disc: on each row, the span within the chord.
    const int y0 = std::max(0, static_cast<int>(std::ceil(p.v - r - 0.5f)));
    const int y1 = std::min(height_ - 1, static_cast<int>(std::floor(p.v + r - 0.5f)));
    for (int y = y0; y <= y1; ++y) {
      const float dy = y + 0.5f - p.v, half = std::sqrt(std::max(0.0f, r * r - dy * dy));
      const int x0 = std::max(0, static_cast<int>(std::ceil(p.u - half - 0.5f)));
      const int x1 = std::min(width_ - 1, static_cast<int>(std::floor(p.u + half - 0.5f)));
      uint64_t* row = &zbuf_[static_cast<size_t>(y) * width_];
      for (int x = x0; x <= x1; ++x) atomic_min(row[x], packed);
    }
  }
}

void Canvas::resolve() {
  const size_t n = zbuf_.size();
  depth_.assign(n, std::numeric_limits<float>::infinity());
  rgb_.resize(n * 3);
  for (size_t i = 0; i < n; ++i) {
    const uint64_t z = zbuf_[i];
    if (z == kEmpty) {
      std::copy(background_.begin(), background_.end(), &rgb_[3 * i]);
      continue;
    }
    depth_[i] = std::bit_cast<float>(static_cast<uint32_t>(z >> 32));
    rgb_[3 * i] = static_cast<uint8_t>(z >> 16);
    rgb_[3 * i + 1] = static_cast<uint8_t>(z >> 8);
    rgb_[3 * i + 2] = static_cast<uint8_t>(z);
  }
}

void Canvas::plot(int x, int y, float z, Rgb colour, float coverage) {
  if (x < 0 || x >= width_ || y < 0 || y >= height_ || !(coverage > 0)) return;
  const size_t i = static_cast<size_t>(y) * width_ + x;
  if (!(z <= depth_[i] * 1.02f)) return;  // behind the points (a line on a surface still shows)
  const float c = std::min(coverage, 1.0f);
  for (int k = 0; k < 3; ++k)
    rgb_[3 * i + k] = static_cast<uint8_t>(std::lround(rgb_[3 * i + k] * (1 - c) + colour[k] * c));
}

void Canvas::draw_line(const View& view, Vec3 a, Vec3 b, Rgb colour) {
  Vec3 qa = view.to_view(a), qb = view.to_view(b);
  // Clip to the near plane in view space, where the line is still straight.
  if (qa[2] < view.near && qb[2] < view.near) return;
  if (qa[2] < view.near || qb[2] < view.near) {
    if (qa[2] < view.near) std::swap(qa, qb);
    const float t = (qa[2] - view.near) / (qa[2] - qb[2]);
    qb = qa + (qb - qa) * t;
    qb[2] = view.near;
  }
  const Projected pa = view.project_view(qa), pb = view.project_view(qb);
  // Pixel centres at integers from here on; 1/z is what varies linearly across the screen.
  float x0 = pa.u - 0.5f, y0 = pa.v - 0.5f, x1 = pb.u - 0.5f, y1 = pb.v - 0.5f;
  float w0 = 1 / pa.z, w1 = 1 / pb.z;
  if (!std::isfinite(x0 + y0 + x1 + y1)) return;
  // Liang-Barsky against the picture (one pixel of margin for the anti-aliased edge).
  float t0 = 0, t1 = 1;
  const float dx = x1 - x0, dy = y1 - y0;
  const float p[4] = {-dx, dx, -dy, dy};
  const float q[4] = {x0 + 1, width_ - x0, y0 + 1, height_ - y0};
  for (int k = 0; k < 4; ++k) {
    if (p[k] == 0) {
      if (q[k] < 0) return;
      continue;
    }
    const float t = q[k] / p[k];
    if (p[k] < 0)
      t0 = std::max(t0, t);
    else
      t1 = std::min(t1, t);
    if (t0 > t1) return;
  }
  const float ax = x0 + t0 * dx, ay = y0 + t0 * dy, bx = x0 + t1 * dx, by = y0 + t1 * dy;
  const float aw = w0 + t0 * (w1 - w0), bw = w0 + t1 * (w1 - w0);
  x0 = ax, y0 = ay, x1 = bx, y1 = by, w0 = aw, w1 = bw;
  // Xiaolin Wu: step along the longer axis, share each step between the two nearest pixels.
  const bool steep = std::fabs(y1 - y0) > std::fabs(x1 - x0);
  if (steep) std::swap(x0, y0), std::swap(x1, y1);
  if (x0 > x1) std::swap(x0, x1), std::swap(y0, y1), std::swap(w0, w1);
  const float run = x1 - x0;
  const float gradient = run > 1e-6f ? (y1 - y0) / run : 0;
  const int start = static_cast<int>(std::lround(x0)), end = static_cast<int>(std::lround(x1));
  for (int x = start; x <= end; ++x) {
    const float t = run > 1e-6f ? std::clamp((x - x0) / run, 0.0f, 1.0f) : 0;
    const float y = y0 + gradient * (x - x0);
    const float z = 1 / (w0 + t * (w1 - w0));
    const int yi = static_cast<int>(std::floor(y));
    const float f = y - yi;
    if (steep) {
      plot(yi, x, z, colour, 1 - f);
      plot(yi + 1, x, z, colour, f);
    } else {
      plot(x, yi, z, colour, 1 - f);
      plot(x, yi + 1, z, colour, f);
    }
  }
}

ImageU8 Canvas::image() const {
  ImageU8 img{width_, height_, rgb_};
  if (img.rgb.empty()) {  // nothing resolved yet: the background
    img.rgb.resize(static_cast<size_t>(width_) * height_ * 3);
    for (size_t i = 0; i < img.rgb.size(); i += 3)
      std::copy(background_.begin(), background_.end(), &img.rgb[i]);
  }
  return img;
}

}  // namespace lingbot::render
