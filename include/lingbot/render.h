// Public API: a finished run drawn on the CPU, without a browser, as a fly-through video or a
// numbered PNG sequence:
//
//   lingbot::RunResult run = lingbot::read_result("result/");
//   lingbot::Renderer renderer(run, {.width = 1280, .height = 720});
//   lingbot::ImageU8 last = renderer.render(renderer.frames() - 1);  // the whole scene
//   lingbot::RenderedVideo v = lingbot::write_video(renderer, "fly.mp4", 10);
//
// Video frame t shows the points of every result frame up to the one it has reached (points
// "grow" along the trajectory), the cameras so far as frustums and the trajectory as a line, in
// camera_colour over kViewBackground, as the viewer draws them. Points are round splats whose
// size follows their distance, hidden behind nearer ones by a depth buffer.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>

#include "lingbot/exports.h"
#include "lingbot/image.h"
#include "lingbot/result.h"

namespace lingbot {

// follow: behind and above the current camera, smoothed over frames; birdeye: straight down on
// the whole scene; static: one overview framing every camera and the scene.
enum class CameraPath { Follow, Birdeye, Static };

// "follow", "birdeye" or "static"; throws Error naming the choices otherwise.
CameraPath parse_camera_path(const std::string& name);
// "WxH" with even sides from 16 to 4096 (video encoders need even sides); throws Error otherwise.
std::pair<int, int> parse_render_size(const std::string& text);

struct RenderOptions {
  int width = 1280, height = 720;
  CameraPath camera = CameraPath::Follow;
  // Video frames; 0 = one per result frame, at most kMaxAutoFrames (longer runs are stepped
  // through evenly).
  int64_t frames = 0;
  float fov_y_degrees = 60;
  float point_size = 1;  // splat diameter as a multiple of the point's footprint in its frame
  PointOptions points;   // which pixels become points (the exports' threshold and stride)
  // Bounds on memory and time for long runs: each result frame's points are thinned evenly to
  // at most this many, and to max_points / frames when all of them together would exceed it.
  int64_t max_points_per_frame = 20000;
  int64_t max_points = 4000000;
  bool frustums = true, trajectory = true;
};
inline constexpr int64_t kMaxAutoFrames = 600;

class Renderer {
 public:
  // Unprojects and thins every frame's points (colours from DIR/images/ when present, grey
  // otherwise) and plans the camera path. Throws Error for bad options or an empty run.
  Renderer(const RunResult& run, const RenderOptions& options);
  ~Renderer();
  Renderer(const Renderer&) = delete;
  Renderer& operator=(const Renderer&) = delete;

  int64_t frames() const;                 // video frames
  int64_t result_frame(int64_t t) const;  // the last result frame that video frame t shows
  int64_t points() const;                 // points kept, all frames together
  const RenderOptions& options() const;
  // Video frame t, 0 <= t < frames(); safe to call from several threads.
  ImageU8 render(int64_t t) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Whether this build writes video files (FFmpeg's libraries); PNG frames otherwise.
bool video_encoding_supported();

struct RenderedVideo {
  std::string path;    // the video file, or the folder of frame_NNNNNN.png
  bool video = false;  // false: PNG frames
  std::string codec;   // the encoder used ("libx264", "mpeg4", ...); empty for PNGs
  int64_t frames = 0;
};

// Renders every frame into `out`: a video when `out` ends in .mp4, .mkv, .mov, .avi or .webm
// and the build has FFmpeg (H.264 when an encoder exists, else the container's default or
// MPEG-4 part 2), otherwise PNG frames in the folder `out` (a video name without FFmpeg: the
// folder of that name less its extension). The video is written beside `out` and renamed over
// it at the end, so an existing file stays valid should rendering fail. `progress(done, total)`
// after each frame. Throws Error (one line) when `out` cannot be written.
RenderedVideo write_video(const Renderer& renderer, const std::string& out, int fps,
                          const std::function<void(int64_t, int64_t)>& progress = {});

}  // namespace lingbot
