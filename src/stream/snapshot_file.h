// The session snapshot file (Session::save, Engine::resume): one safetensors container, its JSON
// header's __metadata__ naming the format and version and holding the sequence's state as a JSON
// string, its tensors the caches' bytes in their stored dtype. This file knows the format only:
// it writes a state and byte pieces, and reads a file back into a state and tensor views with
// every field and shape checked for what the state implies. Whether the file fits the engine
// that resumes it (architecture, precision, weights, the model's dimensions) is checked where
// the session is rebuilt (stream/session_snapshot.cpp).
//
// Tensors (L global layers, R frames resident in the KV pages, P tokens a frame, H heads,
// D head dim; the camera head's slots S = iterations x trunk depth):
//   kv.k, kv.v                 [L, R, P, H, D]  the scale pages then the window's, oldest first
//   kv.stream.k, kv.stream.v   [L, rows, H, D]  the evicted frames' special tokens
//   kv.scales                  [L, 2, H] F32    e4m3 caches only: each layer's K and V scales
//   camera.k, camera.v         [S, frames, Hc, Dc]
//   keyframe.c2w [12], keyframe.K [9]  F32     the adaptive keyframe rule's reference camera
//   pending                    [n, 3, h, w] F32 scale-block frames pushed but not yet run
//   trajectory.pose_enc [N, 9] F32, trajectory.index [N] I64, trajectory.flags [N] U8
//                              every delivered frame's camera (flags: 1 keyframe, 2 scale frame)
// kv.* and camera.* are present once the sequence's first step has run.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "lingbot/engine.h"
#include "weights/tensor_map.h"

namespace lingbot {

inline constexpr const char* kSnapshotFormat = "lingbot-session";
inline constexpr int kSnapshotVersion = 1;

// The model a snapshot was made with.
struct SnapshotModel {
  std::string arch;
  int64_t dim = 0, depth = 0, heads = 0;
  std::string compute, kv_cache;  // dtype names: "F32", "BF16", "F8_E4M3"
  std::string weights;            // the weights' digest (weights/digest.h)
};

struct SnapshotState {
  SnapshotModel model;
  StreamOptions options;
  int64_t height = 0, width = 0;  // model input; 0 before the first frame
  int64_t next_index = 0;         // the index the next pushed frame gets
  int64_t pending = 0;            // scale-block frames buffered
  bool started = false;           // the first step ran: the caches below hold frames
  int64_t scale_frames = 0;       // frames of that first step
  struct Pages {
    std::vector<int32_t> scale, live, free;
  } pages;
  int64_t stored_frames = 0;  // frames the KV cache kept: the 3D RoPE time of the next one
  std::vector<bool> calibrated;
  int64_t stream_head = 0, stream_rows = 0;
  int64_t camera_rows = 0, camera_pinned = 0, camera_head = 0;
  int64_t keyframe_last = -1;  // -1: none yet
  int64_t trajectory = 0;      // frames in trajectory.*
};

struct SessionSnapshot {
  SnapshotState state;
  TensorMap tensors;  // views into the file's mapping
  size_t bytes = 0;   // the file's size
};

// Every field and tensor checked: a damaged, truncated or foreign file is one Error naming
// `what`, never a bad read.
SessionSnapshot parse_snapshot(const uint8_t* data, size_t size, std::shared_ptr<void> owner,
                               const std::string& what);
SessionSnapshot read_snapshot(const std::string& path);

// One tensor to write: `pieces` in order make up its bytes; `device` pieces are read through
// the writer's `read` (a backend's memory), the others are host memory.
struct SnapshotTensor {
  std::string name;
  DType dtype = DType::F32;
  Shape shape;
  struct Piece {
    const void* data = nullptr;
    size_t bytes = 0;
  };
  std::vector<Piece> pieces;
  bool device = true;
};
using SnapshotRead = std::function<void(const void* src, void* host, size_t bytes)>;

// Writes the file beside `path` and renames it over `path` once complete and flushed to disk,
// so that `path` is the old file or the whole new one, never a part.
void write_snapshot(const std::string& path, const SnapshotState& state,
                    const std::vector<SnapshotTensor>& tensors, const SnapshotRead& read);

}  // namespace lingbot
