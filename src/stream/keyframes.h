// Flow-based adaptive keyframes: the decision needs the frame's own outputs, so the
// session runs every streamed frame speculatively and keeps it only if this says so.
#pragma once

#include <array>
#include <cstdint>

#include "lingbot/engine.h"

namespace lingbot {

// Mean camera-motion-induced reprojection displacement, in pixels of the model input, of the
// pixels on a `stride` grid from (0, 0): each is lifted with `current`'s depth, K and c2w, then
// projected into the keyframe camera (c2w `key_c2w`, intrinsics `key_K`, both row-major). Samples
// with depth <= 1e-6 or keyframe depth <= 1e-6 do not count, nor (our addition; the reference
// would propagate inf or NaN) samples whose projection is not finite; 0 when none counts. This is
// the reference's "flow": no image content is compared, only the predicted geometry.
double flow_magnitude(const FrameResult& current, const std::array<float, 12>& key_c2w,
                      const std::array<float, 9>& key_K, int stride = 8);

struct KeyframePolicy {
  double threshold = 0;  // pixels of flow_magnitude
  int64_t max_gap = 30;  // frames since the last keyframe that force a new one

  // `first`: the first streamed frame of the sequence, always a keyframe so that the
  // stream has an anchor past the scale frames. The gap is counted in absolute frame indices.
  bool is_keyframe(bool first, double magnitude, int64_t index, int64_t last_keyframe) const {
    return first || magnitude > threshold || index - last_keyframe >= max_gap;
  }
  // Whether the flow is needed at all: the rule is already settled without it.
  bool forced(bool first, int64_t index, int64_t last_keyframe) const {
    return first || index - last_keyframe >= max_gap;
  }
};

// The rule with its memory: the last keyframe, which flow is measured against. A sequence seeds
// it with every frame it keeps unconditionally (its scale frames), then asks decide().
class AdaptiveKeyframes {
 public:
  explicit AdaptiveKeyframes(KeyframePolicy policy) : policy_(policy) {}
  void reset() { last_ = -1; }
  void keep(const FrameResult& r) {
    last_ = r.index;
    c2w_ = r.c2w;
    K_ = r.intrinsics;
  }
  // The memory alone, for a session snapshot.
  struct State {
    int64_t last = -1;
    std::array<float, 12> c2w{};
    std::array<float, 9> K{};
  };
  State state() const { return {last_, c2w_, K_}; }
  void restore(const State& s) {
    last_ = s.last;
    c2w_ = s.c2w;
    K_ = s.K;
  }
  // `first`: the first streamed frame of the sequence. A keyframe becomes the new reference.
  bool decide(const FrameResult& r, bool first) {
    const bool forced = policy_.forced(first, r.index, last_);
    const double flow = forced ? 0.0 : flow_magnitude(r, c2w_, K_);
    const bool key = policy_.is_keyframe(first, flow, r.index, last_);
    if (key) keep(r);
    return key;
  }

 private:
  KeyframePolicy policy_;
  int64_t last_ = -1;
  std::array<float, 12> c2w_{};
  std::array<float, 9> K_{};
};

}  // namespace lingbot
