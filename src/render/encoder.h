// A video file written frame by frame through FFmpeg's libraries (only in builds with them).
#pragma once

#include <memory>
#include <string>

#include "lingbot/image.h"

namespace lingbot::render {

class VideoEncoder {
 public:
  // The container from `name`'s extension; the file itself written to `path` (a temporary beside
  // `name`). Codec: H.264 (libx264 first) when the container takes it, else the container's
  // default, else MPEG-4 part 2; the first that opens. Throws Error when none does or `path`
  // cannot be written.
  VideoEncoder(const std::string& path, const std::string& name, int width, int height, int fps);
  ~VideoEncoder();
  VideoEncoder(const VideoEncoder&) = delete;
  VideoEncoder& operator=(const VideoEncoder&) = delete;

  void add(const ImageU8& frame);  // width x height, as opened
  void finish();                   // flushes the encoder and writes the trailer
  const std::string& codec() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Whether `path` ends in an extension write_video treats as a video (.mp4, .mkv, .mov, .avi,
// .webm, any letter case).
bool is_video_name(const std::string& path);

}  // namespace lingbot::render
