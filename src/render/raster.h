// The rasteriser: round point splats into a depth buffer, then depth-tested anti-aliased lines
// on top, into an 8-bit RGB picture.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "lingbot/image.h"
#include "render/view.h"

namespace lingbot::render {

using Rgb = std::array<uint8_t, 3>;

// Points to draw: world positions, colours, and each point's footprint (the world size of the
// patch of pixels it stands for), which sets its splat's size at a given distance.
struct PointCloud {
  std::vector<float> xyz;        // 3 per point
  std::vector<uint8_t> rgb;      // 3 per point
  std::vector<float> footprint;  // 1 per point
  int64_t size() const { return static_cast<int64_t>(footprint.size()); }
};

class Canvas {
 public:
  Canvas(int width, int height, Rgb background);

  // Points [0, count) of `cloud` as seen by `view`; a splat's diameter is
  // point_size * footprint * focal / depth pixels, at least one pixel and at most kMaxSplat. The
  // nearest point wins each pixel, whatever the order (threads draw at once).
  void draw_points(const View& view, const PointCloud& cloud, int64_t count, float point_size);
  static constexpr float kMaxSplat = 16;

  // The depth buffer as it stands after draw_points (infinity where no point is), then lines:
  // a world segment, clipped to the view, drawn where it is nearer than the points (within a
  // small margin, so that lines on surfaces show), blended by coverage.
  void resolve();
  void draw_line(const View& view, Vec3 a, Vec3 b, Rgb colour);

  ImageU8 image() const;
  int width() const { return width_; }
  int height() const { return height_; }
  float depth(int x, int y) const { return depth_[static_cast<size_t>(y) * width_ + x]; }

 private:
  void plot(int x, int y, float z, Rgb colour, float coverage);
  int width_, height_;
  Rgb background_;
  // Depth (float bits, positive so their order is the integers') in the high word, RGB in the
  // low: an atomic minimum keeps the nearest point and its colour in one step.
  std::vector<uint64_t> zbuf_;
  std::vector<float> depth_;
  std::vector<uint8_t> rgb_;
};

}  // namespace lingbot::render
