// Windowed inference (spec 03 §5): the sequence is cut into overlapping windows, each streamed
// with fresh caches in its own world frame (anchored at its first camera, scaled by its scale
// frames), then every window is brought into window 0's frame by a Sim(3) estimated on the
// overlap and the windows are stitched.
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
  int overlap = -1;            // frames; -1 = from overlap_keyframes or scale_frames
  int overlap_keyframes = -1;  // overlap in keyframes; wins over `overlap` when set
  int scale_frames = 8;
  int keyframe_interval = 1;
  int sliding_window = 64;
  int camera_iterations = 4;
  // > 0: flow-based adaptive keyframes (§5.3). A window then closes after its
  // (window_size - scale frames)-th keyframe, so windows follow the motion, not a fixed plan.
  float flow_threshold = 0;
  int max_non_keyframe_gap = 30;
  int64_t max_special_frames = 0;  // StreamOptions::max_special_frames, per window
};

// The overlap in frames for a sequence of `frames` frames (§5.1).
int64_t resolve_overlap(int64_t frames, const WindowedOptions& options);

// The options each window is streamed with. A window caches at most window_size frames (its
// scale block, then window_size - scale keyframes), so its sliding window is cut to
// window_size - scale frames (at least 1) when that is shorter: a longer one would only reserve
// pages of the KV pool that are never filled. Nothing is evicted either way, so results do not
// change.
StreamOptions window_stream_options(const WindowedOptions& options);

// The fixed-interval schedule (§5.2): windows [begin, end), in order. With a flow threshold the
// windows are known only as they run (see run_windowed).
std::vector<std::pair<int64_t, int64_t>> plan_windows(int64_t frames,
                                                      const WindowedOptions& options);

// One window's predictions, in the window's own world frame until warped.
struct WindowPrediction {
  int64_t height = 0, width = 0;
  std::vector<std::array<float, 9>> pose_enc;
  std::vector<float> depth, conf;   // [T, H, W]
  std::vector<uint8_t> frame_type;  // 0 scale, 1 keyframe, 2 non-keyframe

  int64_t frames() const { return static_cast<int64_t>(pose_enc.size()); }
  bool is_keyframe(int64_t i) const { return frame_type[i] != 2; }
};

// x -> s R x + t; applied to camera centres and, through s, to depth.
struct Sim3 {
  double s = 1;
  std::array<std::array<double, 3>, 3> R{{{1, 0, 0}, {0, 1, 0}, {0, 0, 1}}};
  std::array<double, 3> t{};
};

// The transform taking `current` (raw) onto `previous` (already warped) from their overlap of
// `overlap` frames (§5.4): rotation and centre of the last frame that is a keyframe in both, scale
// the lower median of the pooled depth ratios of all such frames.
Sim3 estimate_alignment(const WindowPrediction& previous, const WindowPrediction& current,
                        int64_t overlap);

// §5.5: poses (quaternion re-derived, w >= 0) and depth; confidence and fields of view stay.
void warp_window(WindowPrediction& window, const Sim3& transform);

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
// of its scale block (§5.3). Alignment and stitching then use the overlap the two windows really
// share, where the reference assumes the nominal one and loses frames when a window is short
// (spec 03 §8); with full-length windows the two agree.
//
// A source that fails part way (`frame_at` throws Error) ends the sequence at the frame that
// failed: the window it fell in is finished with the frames it has, aligned and stitched as the
// last one, and the error is returned in `source_error` rather than thrown (thrown when no frame
// came before it).
WindowedResult run_windowed(Engine& engine, int64_t frames,
                            const std::function<Tensor(int64_t)>& frame_at,
                            const WindowedOptions& options,
                            const std::function<void(const char*)>& log = {});

}  // namespace lingbot
