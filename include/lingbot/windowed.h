// Public API: windowed inference. The sequence is cut into overlapping windows,
// each streamed with fresh caches in its own world frame, then every window is brought into
// window 0's frame by a Sim(3) estimated on the overlap and the windows are stitched. A window's
// frames are delivered once it is aligned, as FrameResults in order, as streaming delivers them.
//
//   lingbot::run_windowed(*engine, frames, frame_at,
//                         {.window_size = 64, .overlap = 16, .stream = {.scale_frames = 8}},
//                         [&](const lingbot::FrameResult& f) { ... });
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "lingbot/engine.h"
#include "lingbot/tensor.h"

namespace lingbot {

struct WindowedOptions {
  int window_size = 64;        // KV slots per window: scale frames + keyframes
  int overlap = -1;            // frames; -1 = from overlap_keyframes or stream.scale_frames
  int overlap_keyframes = -1;  // overlap in keyframes; wins over `overlap` when set
  // How each window streams, as a streaming run would: its scale frames, its window as each
  // window's sliding window (cut to the keyframes a window holds), its keyframe interval (0 or 1:
  // every frame), camera iterations, special-token settings and special-frame cap. With a flow
  // threshold (> 0: adaptive keyframes) a window closes after its (window_size - scale
  // frames)-th keyframe, so windows follow the motion, not a fixed plan.
  StreamOptions stream;
};

// How a window was brought into window 0's frame: x -> scale * R x + t.
struct WindowAlignment {
  int64_t index = 0;                  // window number
  int64_t begin = 0, end = 0;         // frames [begin, end) of the sequence it ran
  float scale = 1;                    // window 0 (and a lone window): 1
  std::array<float, 16> transform{};  // row-major 4x4 [R | t; 0 0 0 1], without the scale
};

struct WindowedRun {
  std::vector<WindowAlignment> windows;
  int64_t frames = 0;  // frames delivered
  // Set when `frame_at` threw part way: its message. The frames before the one that failed were
  // delivered, as a run given only those frames would have delivered them.
  std::string source_error;
};

// Streams each window through one Session (reset between windows), fetching frame i through
// `frame_at(i)` when a window needs it (overlapping frames are fetched again), aligns each window
// to the one before and delivers the stitched frames in order through `on_result`, as a
// streaming session does: a window's frames as soon as it is aligned (frames it shares with the
// next window come from the next one), each window's alignment through `on_window` before its
// frames. `log` receives one line per window.
//
// With a flow threshold, each window runs from its start until it holds window_size - scale
// frames keyframes, and the next starts `overlap` frames before its end, but not before the end
// of its scale block. Alignment and stitching then use the overlap the two windows really
// share, where the reference assumes the nominal one and loses frames when a window is short;
// with full-length windows the two agree.
//
// A source that fails part way (`frame_at` throws Error) ends the sequence at the frame that
// failed: the window it fell in is finished with the frames it has, aligned and stitched as the
// last one, and the error is returned in `source_error` rather than thrown (thrown when no frame
// came before it).
WindowedRun run_windowed(Engine& engine, int64_t frames,
                         const std::function<Tensor(int64_t)>& frame_at,
                         const WindowedOptions& options, const Session::Callback& on_result,
                         const std::function<void(const WindowAlignment&)>& on_window = {},
                         const std::function<void(const char*)>& log = {});

// The whole stitched sequence at once, as predictions.safetensors holds it.
struct WindowedResult {
  Tensor pose_enc;          // F32 [S, 9]
  Tensor depth;             // F32 [S, H, W]
  Tensor depth_conf;        // F32 [S, H, W]
  Tensor frame_type;        // U8 [S]: 0 scale, 1 keyframe, 2 non-keyframe
  Tensor is_keyframe;       // Bool [S]
  Tensor chunk_scales;      // F32 [n_windows]
  Tensor chunk_transforms;  // F32 [n_windows, 4, 4]
  Tensor c2w, w2c;          // F32 [S, 3, 4]
  Tensor intrinsics;        // F32 [S, 3, 3]
  std::vector<std::pair<int64_t, int64_t>> windows;
  std::string source_error;
};

// run_windowed with every result collected.
WindowedResult run_windowed(Engine& engine, int64_t frames,
                            const std::function<Tensor(int64_t)>& frame_at,
                            const WindowedOptions& options,
                            const std::function<void(const char*)>& log = {});

}  // namespace lingbot
