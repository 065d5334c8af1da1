// The streaming driver: phase 1 runs the first scale frames together, phase 2 one frame per
// call; non-keyframes attend and are rolled back. Keyframes follow a fixed interval, or with a
// flow threshold the frame's own predicted motion (spec 03 §6).
#pragma once

#include <array>
#include <memory>
#include <optional>
#include <vector>

#include "cache/camera_cache.h"
#include "cache/paged_kv.h"
#include "lingbot/engine.h"
#include "model/model.h"
#include "stream/keyframes.h"

namespace lingbot {

class StreamSession final : public Session {
 public:
  StreamSession(Model& model, const StreamOptions& options);
  void push(const Tensor& image, const Callback& on_result) override;
  void finish(const Callback& on_result) override;
  void reset() override;
  CacheStats cache_stats() const override;

  // Frame t (0-based, t >= scale frames) is a keyframe under a fixed interval.
  static bool is_keyframe(int64_t t, int64_t scale_frames, int64_t interval) {
    return interval <= 1 || (t - scale_frames) % interval == 0;
  }

 private:
  void run(const std::vector<Tensor>& frames, bool keyframe, const Callback& on_result);
  void run_adaptive(const Tensor& image, const Callback& on_result);
  // On failure neither cache keeps any part of the step.
  Model::Output forward(const std::vector<Tensor>& frames, Model::Step step);
  // Frame f of `out` as the next result in sequence order.
  FrameResult make_result(const Model::Output& out, int64_t f);
  void note_keyframe(const FrameResult& r);
  bool adaptive() const { return opt_.flow_threshold > 0; }

  Model& model_;
  StreamOptions opt_;
  std::unique_ptr<PagedKVCache> kv_;
  std::optional<CameraCache> camera_;
  std::vector<Tensor> pending_;  // phase-1 frames not yet run
  int64_t next_index_ = 0;       // index of the next frame to emit
  int64_t scale_frames_ = 0;     // this sequence's phase-1 size, once known
  int64_t height_ = 0, width_ = 0;
  // The last keyframe, which flow is measured against; phase 1 seeds it with the last scale frame.
  KeyframePolicy policy_;
  int64_t last_keyframe_ = -1;
  std::array<float, 12> key_c2w_{};
  std::array<float, 9> key_K_{};
};

}  // namespace lingbot
