// Windowed inference, the parts behind lingbot/windowed.h: the sequence is cut into
// overlapping windows, each streamed with fresh caches in its own world frame (anchored at its
// first camera, scaled by its scale frames), then every window is brought into window 0's frame by
// a Sim(3) estimated on the overlap and the windows are stitched.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "lingbot/engine.h"
#include "lingbot/tensor.h"
#include "lingbot/windowed.h"

namespace lingbot {

// The overlap in frames for a sequence of `frames` frames.
int64_t resolve_overlap(int64_t frames, const WindowedOptions& options);

// The stream options each window's session runs with: `options.stream` whole, its keyframe
// interval at least 1, and its sliding window cut to window_size - scale frames (at least 1)
// when that is shorter: a window caches at most window_size frames (its scale block, then
// window_size - scale keyframes), so a longer one would only reserve pages of the KV pool that
// are never filled. Nothing is evicted either way, so results do not change.
StreamOptions per_window_stream(const WindowedOptions& options);

// The fixed-interval schedule: windows [begin, end), in order. With a flow threshold the
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

// x -> s R x + t; applied to camera centres and, through s, to depth. R as a matrix, apart from
// the public lingbot::Sim3 (quaternion) of lingbot/loop.h: one name, one type in the program.
struct Sim3Rt {
  double s = 1;
  std::array<std::array<double, 3>, 3> R{{{1, 0, 0}, {0, 1, 0}, {0, 0, 1}}};
  std::array<double, 3> t{};
};

// The transform taking `current` (raw) onto `previous` (already warped) from their overlap of
// `overlap` frames: rotation and centre of the last frame that is a keyframe in both, scale
// the lower median of the pooled depth ratios of all such frames.
Sim3Rt estimate_alignment(const WindowPrediction& previous, const WindowPrediction& current,
                          int64_t overlap);

// Poses (quaternion re-derived, w >= 0) and depth; confidence and fields of view stay.
void warp_window(WindowPrediction& window, const Sim3Rt& transform);

}  // namespace lingbot
