// The streaming driver: phase 1 runs the first scale frames together, phase 2 one frame per
// call; non-keyframes attend and are rolled back.
#pragma once

#include <memory>
#include <optional>
#include <vector>

#include "cache/camera_cache.h"
#include "cache/paged_kv.h"
#include "lingbot/engine.h"
#include "model/model.h"

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

  Model& model_;
  StreamOptions opt_;
  std::unique_ptr<PagedKVCache> kv_;
  std::optional<CameraCache> camera_;
  std::vector<Tensor> pending_;   // phase-1 frames not yet run
  int64_t next_index_ = 0;        // index of the next frame to emit
  int64_t scale_frames_ = 0;      // this sequence's phase-1 size, once known
  int64_t height_ = 0, width_ = 0;
};

}  // namespace lingbot
