// Public API: a finished run read back (its predictions.safetensors and images/), and what a
// viewer or renderer draws of it, so that every one of them draws the same thing:
//
//   lingbot::RunResult run = lingbot::read_result("result/");
//   for (int64_t i = 0; i < run.size(); ++i) {
//     lingbot::FrameResult f = lingbot::result_frame(run, i);  // with its depth maps
//     std::optional<lingbot::Tensor> rgb = lingbot::read_result_image(run, f.index);
//     lingbot::FramePoints p = lingbot::frame_points(f, rgb ? &*rgb : nullptr, {});
//     std::array<uint8_t, 3> c = lingbot::camera_colour(f.index, run.frames.size());
//   }
//
// Conventions: world coordinates are those of the first camera (OpenCV axes: x right, y down,
// z forward), c2w maps camera to world, depth is along the camera's z axis.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "lingbot/engine.h"
#include "lingbot/exports.h"
#include "lingbot/tensor.h"

namespace lingbot {

struct RunResult {
  std::string dir;  // the folder read (images are looked up under it)
  // In frame order, index = position: cameras, frame types and sizes, but no depth or confidence
  // maps (8 bytes a pixel: 16 GB for 10,000 frames at 378x504); result_frame reads those.
  std::vector<FrameResult> frames;
  bool windowed = false;
  std::shared_ptr<const void> maps;  // the mapped file the maps are read from
  int64_t size() const { return static_cast<int64_t>(frames.size()); }
};

// `path`: a result folder (holding predictions.safetensors) or the file itself, memory-mapped.
// Throws Error when it is missing, not a predictions file, or its tensors disagree in shape.
RunResult read_result(const std::string& path);

// Frame `index` with its depth and confidence maps, copied from the mapped file (a frame that
// holds its maps already, as in a RunResult made in memory, is returned as it is).
FrameResult result_frame(const RunResult& run, int64_t index);

// The model input of frame `index` as F32 [3, H, W] in [0, 1] from DIR/images/ (written by `run`
// with the image, colmap or nerfstudio exports); nullopt when absent. Throws Error when it exists
// but cannot be decoded or its size is not the frame's.
std::optional<Tensor> read_result_image(const RunResult& run, int64_t index,
                                        const FrameNamer& name = {});

// The names of the frames in DIR/images/: frame_NNNNNN.png when the first frame is there by that
// name, else the folder's images in natural order when there are as many as frames (`run` keeps
// the input pictures' names), else the default names (the images are then absent).
FrameNamer result_image_names(const RunResult& run);

// A frame's world points as the exports write them: pixel (u, v) with depth d goes to
// c2w * ((u - cx) d / fx, (v - cy) d / fy, d), kept when its confidence is above the threshold,
// on the stride grid and finite; colours from `rgb` ([3, H, W], U8 or F32 in [0, 1]), grey
// without it.
struct FramePoints {
  std::vector<float> xyz;         // 3 per point
  std::vector<uint8_t> rgb;       // 3 per point
  std::vector<float> confidence;  // 1 per point
  int64_t size() const { return static_cast<int64_t>(confidence.size()); }
};
FramePoints frame_points(const FrameResult& frame, const Tensor* rgb, const PointOptions& options);

// The colour of camera `index` of `count` (frustums, trajectory): a ramp from the first frame
// (blue) to the last (yellow), the same in the viewer and the renderer.
std::array<uint8_t, 3> camera_colour(int64_t index, int64_t count);

// The background behind the points in the viewer, its screenshots and rendered videos.
inline constexpr std::array<uint8_t, 3> kViewBackground = {16, 18, 24};

}  // namespace lingbot
