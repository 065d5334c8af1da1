// Public API: windowed inference. The sequence is cut into overlapping windows,
// each streamed with fresh caches in its own world frame, then every window is brought into
// window 0's frame by a Sim(3) estimated on the overlap and the windows are stitched. Results
// are complete only at the end.
//
//   lingbot::WindowedResult r = lingbot::run_windowed(*engine, frames, frame_at, {.window_size =
//   64}); lingbot::for_each_frame(r, [&](const lingbot::FrameResult& f) { ... });  // as
//   streaming's lingbot::write_predictions("out/predictions.safetensors", r);
#pragma once

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
  int overlap = -1;            // frames; -1 = from overlap_keyframes or scale_frames
  int overlap_keyframes = -1;  // overlap in keyframes; wins over `overlap` when set
  int scale_frames = 8;
  int keyframe_interval = 1;
  int sliding_window = 64;
  int camera_iterations = 4;
  // > 0: flow-based adaptive keyframes. A window then closes after its
  // (window_size - scale frames)-th keyframe, so windows follow the motion, not a fixed plan.
  float flow_threshold = 0;
  int max_non_keyframe_gap = 30;
  int64_t max_special_frames = 0;  // StreamOptions::max_special_frames, per window
};

struct WindowedResult {
  Tensor pose_enc;          // F32 [S, 9]
  Tensor depth;             // F32 [S, H, W]
  Tensor depth_conf;        // F32 [S, H, W]
  Tensor frame_type;        // U8 [S]: 0 scale, 1 keyframe, 2 non-keyframe
  Tensor is_keyframe;       // Bool [S]
  Tensor chunk_scales;      // F32 [n_windows]; window 0 (and a lone window) 1
  Tensor chunk_transforms;  // F32 [n_windows, 4, 4]: [R | t] without the scale
  Tensor c2w, w2c;          // F32 [S, 3, 4]
  Tensor intrinsics;        // F32 [S, 3, 3]
  std::vector<std::pair<int64_t, int64_t>> windows;
  // Set when `frame_at` threw part way: its message. The result then holds the frames before
  // the one that failed, as a run given only those frames would have returned them.
  std::string source_error;
};

// Streams each window through one Session (reset between windows), fetching frame i through
// `frame_at(i)` when a window needs it (overlapping frames are fetched again), then aligns, warps
// and stitches. `log` receives one line per window.
//
// With a flow threshold, each window runs from its start until it holds window_size - scale
// frames keyframes, and the next starts `overlap` frames before its end, but not before the end
// of its scale block. Alignment and stitching then use the overlap the two windows really
// share, where the reference assumes the nominal one and loses frames when a window is short
//; with full-length windows the two agree.
//
// A source that fails part way (`frame_at` throws Error) ends the sequence at the frame that
// failed: the window it fell in is finished with the frames it has, aligned and stitched as the
// last one, and the error is returned in `source_error` rather than thrown (thrown when no frame
// came before it).
WindowedResult run_windowed(Engine& engine, int64_t frames,
                            const std::function<Tensor(int64_t)>& frame_at,
                            const WindowedOptions& options,
                            const std::function<void(const char*)>& log = {});

// The stitched frames as FrameResults, in order, as a streaming session delivers them.
void for_each_frame(const WindowedResult& result, const Session::Callback& on_result);

// predictions.safetensors of a windowed run: the streaming file's tensors plus frame_type,
// is_keyframe, chunk_scales and chunk_transforms.
void write_predictions(const std::string& path, const WindowedResult& result);

}  // namespace lingbot
