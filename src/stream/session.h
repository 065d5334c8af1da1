// The streaming driver: phase 1 runs the first scale frames together, phase 2 one frame per
// step; non-keyframes attend and are rolled back. Keyframes follow a fixed interval, or with a
// flow threshold the frame's own predicted motion. The session decides what each step is; its
// SequenceState holds the caches and carries the step out with the model.
#pragma once

#include <future>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "lingbot/engine.h"
#include "model/model.h"
#include "stream/keyframes.h"
#include "stream/scheduler.h"
#include "stream/sequence.h"

namespace lingbot {

struct SessionSnapshot;

class StreamSession final : public Session {
 public:
  // Steps go through `scheduler`, which may batch them with other sessions' steps. `weights`:
  // the digest of the model's weights that snapshots record (an engine computes it beside the
  // loading); without it the session cannot be saved.
  StreamSession(Model& model, StepScheduler& scheduler, const StreamOptions& options,
                std::shared_future<std::string> weights = {});
  ~StreamSession() override;
  void push(const Tensor& image, const Callback& on_result) override;
  void finish(const Callback& on_result) override;
  void flush(const Callback& on_result) override;
  void reset() override;
  CacheStats cache_stats() const override;
  // Snapshots (stream/session_snapshot.cpp; the file: stream/snapshot_file.h).
  void save(const std::string& path) override;
  std::vector<FrameResult> trajectory() const override;
  // The session `snapshot` describes, on `model`; `what` names the file in errors. Throws Error
  // when the snapshot was made with another model or does not fit this one.
  static std::unique_ptr<StreamSession> resume(Model& model, StepScheduler& scheduler,
                                               std::shared_future<std::string> weights,
                                               const SessionSnapshot& snapshot,
                                               const ResumeOptions& options,
                                               const std::string& what);

  // Frame t (0-based, t >= scale frames) is a keyframe under a fixed interval.
  static bool is_keyframe(int64_t t, int64_t scale_frames, int64_t interval) {
    return interval <= 1 || (t - scale_frames) % interval == 0;
  }

 private:
  void run(const std::vector<Tensor>& frames, bool keyframe, const Callback& on_result);
  void run_adaptive(const Tensor& image, const Callback& on_result);
  // Queues a step of these frames on the model, through the scheduler.
  void submit(const std::vector<Tensor>& frames, StepMode mode);
  // Hands out the results of the step still on the device, if any, and those held by a save.
  void deliver_in_flight(const Callback& on_result);
  // Waits for the step still on the device and holds its results for delivery.
  void collect_in_flight();
  // Adds a finished result's camera to the trajectory.
  void record(const FrameResult& r);
  // Frame f of `out` as the next result in sequence order.
  FrameResult make_result(const Model::Output& out, int64_t f);
  bool adaptive() const { return opt_.flow_threshold > 0; }

  Model& model_;
  StepScheduler& scheduler_;
  StreamOptions opt_;
  std::unique_ptr<SequenceState> seq_;  // once the first frame gives the size
  std::vector<Tensor> pending_;         // phase-1 frames not yet run
  int64_t next_index_ = 0;              // index of the next frame to emit
  // Phase 1 seeds it with the last scale frame.
  AdaptiveKeyframes keyframes_;
  // A fixed-interval frame's step runs on the device while the host returns to take the next
  // frame; its results go out at the next push (or finish), or at once on a backend that does
  // not queue work. The cache state after it is kept
  // for cache_stats() calls made from its result callbacks.
  struct InFlight {
    int64_t frames = 0;
    bool keyframe = true;
    CacheStats stats;
  };
  std::optional<InFlight> in_flight_;
  std::optional<CacheStats> delivering_;
  // Results collected by save() before their push delivered them, and the caches after them.
  std::vector<FrameResult> held_;
  CacheStats held_stats_;
  // The cameras of the frames delivered (trajectory()): what a snapshot keeps of the results.
  struct Camera {
    int64_t index = 0;
    std::array<float, 9> pose_enc{};
    uint8_t flags = 0;  // kCameraKeyframe | kCameraScaleFrame
  };
  static constexpr uint8_t kCameraKeyframe = 1, kCameraScaleFrame = 2;
  std::vector<Camera> cameras_;
  std::shared_future<std::string> weights_;
};

}  // namespace lingbot
