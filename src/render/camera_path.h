// Where the renderer's camera is at each moment of the video, for each CameraPath.
#pragma once

#include <vector>

#include "lingbot/render.h"
#include "render/view.h"

namespace lingbot::render {

// What the paths are planned from: the run's cameras and the extent of what they saw.
struct Scene {
  std::vector<Vec3> centres, forwards;  // per result frame, world
  Vec3 lo{0, 0, 0}, hi{0, 0, 0};        // bounds of the cameras and most points (outliers left out)
  float depth = 1;                      // typical distance from a camera to the points it sees
};

// Bounds of the cameras and of the points between the 2nd and 98th percentile on each axis,
// grown to at least depth/10 on each; `xyz` 3 floats per point (a sample will do).
void set_bounds(Scene& scene, const std::vector<float>& xyz);

class CameraPlan {
 public:
  // `step`: result frames per video frame; the follow path is smoothed over at least that.
  CameraPlan(Scene scene, CameraPath path, int width, int height, float fov_y, double step = 1);
  // The view at `position`, in result frames (fractional between two frames).
  View at(double position) const;
  const Scene& scene() const { return scene_; }

  // Follow: behind the (smoothed) camera by this many scene depths, above it by kAbove, looking
  // at the point kAhead depths in front of it.
  static constexpr float kBehind = 0.8f, kAbove = 0.4f, kAhead = 0.8f;
  // Gaussian sigma of the follow path: this many frames, or 1.5 video frames when longer.
  static constexpr double kSmoothFrames = 3;

 private:
  Scene scene_;
  CameraPath path_;
  int width_, height_;
  float fov_y_;
  std::vector<Vec3> centres_, forwards_;  // smoothed (follow)
  View fixed_;                            // birdeye and static
};

}  // namespace lingbot::render
