// What the viewer shows, encoded once for every browser: one binary message per frame (its
// points and camera), the latest input frame, the camera colours and a status line. Written by
// one producer at a time (a run's sink thread, or load), read by the server's thread; each
// browser keeps a Cursor saying what it has been sent, so a slow browser costs no memory and
// delays no one. The frames are kept for browsers that join later; past max_bytes they are
// thinned (every other point, again as needed), so a long run's memory stays bounded too.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "lingbot/engine.h"
#include "lingbot/exports.h"
#include "lingbot/tensor.h"

namespace lingbot::viewer {

struct Message {
  std::shared_ptr<const std::string> data;
  bool text = false;  // JSON text, else binary
  explicit operator bool() const { return data != nullptr; }
};

// Binary message types: the first little-endian u32 of each binary message.
enum MessageType : uint32_t { kFrame = 1, kImage = 2, kColours = 3 };

// Confidence is sent as u8 q = round(log(c) * kConfScale), c = exp(q / kConfScale): 2.5 %
// steps from 1 (the model's floor) up to e^6.4 ~ 600.
inline constexpr float kConfScale = 40.0f;

struct SceneOptions {
  PointOptions points;
  float initial_threshold = 1.5f;
  int image_width = 320;
  int64_t max_bytes = 0;  // frames held beyond this are thinned (0 = no limit)
};

// Frame message (all little-endian; the header keeps the arrays 2-byte aligned):
//   u32 type=1, index, flags (1 keyframe, 2 scale frame), count N, width, height
//   f32 c2w[12], intrinsics[9], offset[3], step[3]     position = offset + step * (q + 32768)
//   u8 colour[3], pad
//   i16 q[3N], u8 rgb[3N], u8 conf[N]
inline constexpr size_t kFrameHeaderBytes = 136;
std::string encode_frame(const FrameResult& frame, const Tensor* rgb, const PointOptions& options,
                         std::array<uint8_t, 3> colour, int64_t* points = nullptr);
// The same message with every k-th of its points (the header's count updated).
std::string thin_frame(const std::string& frame, int k);
// Image message: u32 type=2, index, width, height, then RGB8 rows; at most max_width wide.
std::string encode_image(int64_t index, const Tensor& rgb, int max_width);

class Scene {
 public:
  explicit Scene(SceneOptions options);

  // What one browser has been sent.
  struct Cursor {
    uint64_t generation = 0;  // 0: nothing yet (the hello comes first)
    size_t next_frame = 0;
    uint64_t image = 0, colours = 0, status = 0;  // versions sent
    bool images = true;                           // the browser wants frame images
  };
  // The next message for that browser, advancing its cursor; empty when it is up to date.
  Message next(Cursor& c);

  void reset(const std::string& source, int64_t expected_frames);  // a new run: all start over
  void add(const FrameResult& frame, const Tensor* rgb);
  void finish();

  // Called (on the producer's thread) after every change; the server wakes its writers.
  void on_change(std::function<void()> f);

  int64_t frames() const;
  int64_t points() const;
  int64_t bytes() const;
  int64_t images_skipped() const;
  int thinning() const;  // 1, or the k of every k-th point kept to stay within max_bytes

 private:
  void thin_locked();
  Message hello_locked() const;
  void update_status_locked();
  void update_colours_locked();
  void changed();

  const SceneOptions options_;
  mutable std::mutex mu_;
  std::function<void()> on_change_;
  uint64_t generation_ = 1;
  std::string source_;
  int64_t expected_ = 0, points_ = 0, bytes_ = 0, images_skipped_ = 0;
  int thin_ = 1;
  bool finished_ = false;
  std::vector<Message> frames_;
  Message image_, colours_, status_;
  uint64_t image_version_ = 0, colours_version_ = 0, status_version_ = 0;
  size_t colours_count_ = 0;  // frames the colours message covers
};

}  // namespace lingbot::viewer
