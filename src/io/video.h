// Frames from video files, capture devices and network streams, decoded by FFmpeg's libraries
// (when the build found them) and handed out one at a time as 8-bit RGB, so that the same
// preprocessing as for image files applies and a long video is never held in memory.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "io/image.h"

namespace lingbot {

// Whether this build can decode video (FFmpeg libraries found at build time).
bool video_supported();

// What `run --input` names: a folder of images, one image, a video file, or a live source (a
// capture device such as /dev/video0, or a URL such as rtsp://...; an http(s) URL turns out to
// be a plain file once opened when the server gives a seekable stream of known length).
enum class InputKind { Folder, Image, VideoFile, Live };
// Throws Error for a path that does not exist.
InputKind classify_input(const std::string& input);

struct VideoOptions {
  // Files: keep every round(source fps / fps)-th decoded frame (at least 1), as the reference
  // demo does; 0 keeps every frame. Live sources ignore it: the queue below paces them.
  double fps = 0;
  int64_t first_k = 0;     // stop after this many sampled frames (0 = all), before `stride`
  int stride = 1;          // keep every stride-th sampled frame
  double timeout_s = 5;    // opening a URL, and a live stream that stalls this long
  int queue_capacity = 2;  // live: decoded frames waiting for the model
  // Files: play at the source's own rate through the live path, as if a camera were filming it.
  bool realtime = false;
};

struct VideoFrame {
  ImageU8 image;
  double timestamp = 0;  // seconds since the stream's start (presentation time)
};

class VideoReader {
 public:
  // Throws Error naming `source` when it cannot be opened, holds no decodable video stream, or
  // this build has no video support.
  static std::unique_ptr<VideoReader> open(const std::string& source, const VideoOptions& options);
  virtual ~VideoReader() = default;

  // The next kept frame, nothing at the end. Files: a decoding or reading failure throws Error
  // (packets the decoder finds damaged are skipped, as ffmpeg does, and a file cut short ends
  // where it was cut, as FFmpeg reports it). Live: the stream ending or failing after the first
  // frame ends it (see end_reason()).
  virtual std::optional<VideoFrame> next() = 0;
  // Live: frames decoded but dropped because the consumer was slower than the source.
  virtual bool live() const = 0;
  virtual int64_t dropped() const = 0;
  // Kept frames expected (from the container's frame count or duration); 0 = unknown.
  virtual int64_t expected_frames() const = 0;
  // Files: the sampling interval the fps option gave.
  virtual int interval() const = 0;
  virtual double source_fps() const = 0;
  // Why a live stream ended early: it failed (a read or decoding error, a stall past the timeout);
  // "" when it ended normally or has not ended.
  virtual std::string end_reason() const = 0;
};

// The queue between a live source's decoder thread and the model: bounded, and a push into a
// full queue discards the oldest entry (the freshest view of the scene is the useful one), so
// memory stays fixed however far the consumer falls behind.
template <class T>
class DropOldestQueue {
 public:
  explicit DropOldestQueue(size_t capacity) : capacity_(capacity ? capacity : 1) {}

  void push(T item) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (closed_) return;
      if (items_.size() == capacity_) {
        items_.pop_front();
        ++dropped_;
      }
      items_.push_back(std::move(item));
    }
    ready_.notify_one();
  }

  // Blocks until an item arrives; nothing once closed and drained.
  std::optional<T> pop() {
    std::unique_lock<std::mutex> lock(mutex_);
    ready_.wait(lock, [&] { return !items_.empty() || closed_; });
    if (items_.empty()) return std::nullopt;
    T item = std::move(items_.front());
    items_.pop_front();
    return item;
  }

  // Items already queued can still be popped; later pushes are ignored.
  void close() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      closed_ = true;
    }
    ready_.notify_all();
  }

  int64_t dropped() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return dropped_;
  }
  size_t size() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return items_.size();
  }

 private:
  const size_t capacity_;
  mutable std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<T> items_;
  int64_t dropped_ = 0;
  bool closed_ = false;
};

// The reference demo's sampling of a sequence: every `interval`-th decoded frame, the first
// `first_k` of those, then every `stride`-th. Feed decoded frames in order.
class FrameSampler {
 public:
  FrameSampler(int interval, int64_t first_k, int stride)
      : interval_(interval < 1 ? 1 : interval),
        first_k_(first_k),
        stride_(stride < 1 ? 1 : stride) {}
  // Whether decoded frame number `decoded` (0, 1, 2, ... in order) is kept.
  bool keep(int64_t decoded) {
    if (decoded % interval_ != 0) return false;
    const int64_t sampled = decoded / interval_;
    if (first_k_ > 0 && sampled >= first_k_) {
      done_ = true;
      return false;
    }
    return sampled % stride_ == 0;
  }
  // True once no later frame can be kept.
  bool done() const { return done_; }
  // Kept frames out of `decoded` decoded frames.
  int64_t kept_of(int64_t decoded) const {
    int64_t sampled = (decoded + interval_ - 1) / interval_;
    if (first_k_ > 0 && sampled > first_k_) sampled = first_k_;
    return (sampled + stride_ - 1) / stride_;
  }

 private:
  int interval_;
  int64_t first_k_;
  int stride_;
  bool done_ = false;
};

// max(1, round(source_fps / fps)) with Python's round (half to even); fps <= 0 gives 1.
int sampling_interval(double source_fps, double fps);

}  // namespace lingbot
