// Public API: model-input frames by index from a folder of images, a video file or a live
// source (capture device such as /dev/video0, stream URL such as rtsp://...), sampled as the
// reference demo does.
//
//   auto source = lingbot::open_source("clip.mp4", {.fps = 10}, [](const lingbot::ImageU8& img) {
//     return lingbot::model_input(img, lingbot::PreprocessMode::Crop, 518);
//   });
//   for (int64_t i = 0; auto frame = source->get(i); ++i) session->push(*frame, on_result);
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "lingbot/exports.h"
#include "lingbot/image.h"
#include "lingbot/tensor.h"

namespace lingbot {

struct SourceOptions {
  double fps = 10;  // video files: sampling rate, as the reference demo (0 = every frame)
  int stride = 1;
  int64_t first_k = 0;  // only the first K frames (0 = all), before `stride`
  // Frames kept after being handed out, for callers that step back (windowed overlaps).
  int64_t keep_recent = 1;
  bool exact_count = false;  // video files: count the kept frames with a decoding pass
  bool quiet = false;        // no line about a video's sampling on stderr
  bool realtime = false;     // video files: paced at their own rate, as a live source
};

// Turns a decoded picture into a model input frame (the run's preprocessing).
using Preprocessor = std::function<Tensor(const ImageU8&)>;

class FrameSource {
 public:
  virtual ~FrameSource() = default;
  // Frame i, or nothing past the end. Folders: any order. Videos: forward, or back to one of
  // the `keep_recent` latest frames; further back re-decodes a file from its start and is an
  // error for a live source. Throws Error when the source fails (an unreadable image, a damaged
  // file, a camera or stream that fails part way: once the frames it delivered are handed out).
  virtual std::optional<Tensor> get(int64_t i) = 0;
  // Frames expected: exact for folders (and video files with exact_count), the container's
  // estimate for other files, first_k or 0 (unknown) for live sources.
  virtual int64_t count() const = 0;
  virtual bool live() const { return false; }
  virtual int64_t dropped() const { return 0; }
  // Seconds of frame i on the source's clock, for TUM trajectories; empty for folders.
  virtual std::function<double(int64_t)> timestamps() const { return {}; }
  virtual FrameNamer names() const { return default_frame_name; }
  // Whether get() may run on several threads at once for different frames (folders: each frame
  // is its own file); otherwise frames are read in order by one thread.
  virtual bool concurrent() const { return false; }
  // Seconds spent so far decoding and preprocessing (summed over the threads that read).
  struct Times {
    double decode = 0, preprocess = 0;
  };
  virtual Times times() const = 0;
};

// Throws Error with one line for a missing path, an empty folder, or a source that cannot be
// opened (including "no video support" in builds without FFmpeg).
std::unique_ptr<FrameSource> open_source(const std::string& input, const SourceOptions& options,
                                         Preprocessor preprocess);

}  // namespace lingbot
