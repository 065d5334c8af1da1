// The whole network for one step: aggregator, camera head, depth head, over the state of the
// sequence the step belongs to.
#pragma once

#include <array>
#include <memory>
#include <mutex>
#include <vector>

#include "cache/camera_cache.h"
#include "cache/paged_kv.h"
#include "lingbot/engine.h"
#include "model/aggregator.h"
#include "model/camera_head.h"
#include "model/depth_head.h"
#include "model/place_descriptor.h"
#include "stream/sequence.h"
#include "util/profile.h"

namespace lingbot {

class Model {
 public:
  Model(Backend& backend, WeightLoader& weights, const ModelConfig& config);

  struct Output {
    Tensor pose_enc;  // host [S, 9]
    Tensor depth;     // host [S, H, W]
    Tensor conf;      // host [S, H, W]
    // host [S, 2C]: unit place descriptors, when the sequence asks (SequenceConfig::descriptors)
    Tensor descriptor;
  };

  // Queues one step of S frames (images01 host F32 [S, 3, H, W] in [0, 1]) on `seq`: the state
  // opens the step in `mode`, the network runs over its caches, and the step is marked queued.
  // A step that fails leaves nothing half-written in the sequence (SequenceState::abort).
  // Thread-safe: steps of different sequences may be queued from different threads.
  void enqueue(SequenceState& seq, const Tensor& images01, StepMode mode);
  // The outputs of the oldest step queued on `seq`, once the device has finished it. They live
  // in that step's host slot: valid until the sequence's next-but-one enqueue.
  Output collect(SequenceState& seq);
  // One step over several sequences with frames of one size: each `images01` is that
  // sequence's [s, 3, H, W]. The token rows of all frames go through the network's linear layers
  // together (the camera head's too); each sequence attends over its own caches, and its
  // outputs go to its own host slot, collected per sequence as above. A sequence's outputs are
  // those of its step alone up to the GEMMs' rounding, which may depend on the row count.
  // Several sequences in one step each bring one frame (multi-frame steps, phase 1, run alone);
  // a sequence appears once. The step fails or is queued as a whole.
  struct Part {
    SequenceState* seq = nullptr;
    Tensor images01;
    StepMode mode = StepMode::Keep;
  };
  void enqueue(const std::vector<Part>& parts);
  // Throws what enqueue would for this part alone (bad frames, a step still open); checks
  // nothing that only a step could find out.
  void validate(const Part& part) const;
  // enqueue + collect.
  Output run(SequenceState& seq, const Tensor& images01, StepMode mode);

  CameraCache make_camera_cache(int iterations) const;

  // The heads' configurations in a model of `config`.
  static CameraHeadConfig camera_head_config(const ModelConfig& config);
  static DepthHeadConfig depth_head_config(const ModelConfig& config);
  // For the memory preflight, each part reporting its own: the parameters the model reads; the
  // device memory its steps on height x width frames keep, backend scratch included
  // (`first_step_frames`: the sequence's first step, whose buffers stay allocated beside those
  // of the one-frame steps); what make_camera_cache's cache reserves for `frames` frames.
  static ParamCount parameters(const ModelConfig& config);
  struct WorkBytes {
    size_t first_step = 0, one_frame_steps = 0, depth_plan = 0, scratch = 0;
    size_t total() const { return first_step + one_frame_steps + depth_plan + scratch; }
  };
  static WorkBytes work_bytes_for(const ModelConfig& config, int64_t height, int64_t width,
                                  int64_t first_step_frames);
  static size_t camera_cache_bytes_for(const ModelConfig& config, int iterations, int64_t frames,
                                       const CameraCacheLimit& limit);

  const ModelConfig& config() const { return cfg_; }
  Backend& backend() const { return backend_; }
  // The stages' times of this model's steps while profiling (Engine::profile_ms).
  ProfileTotals& profile() { return profile_; }
  // The emitted aggregator layers of the last call (for parity tests).
  const std::array<Tensor, 4>& last_layers() const { return *layers_; }
  // The DINO trunk's output of the last call, [S, 1 + R + Np, C] (for the descriptor's tests).
  const Tensor& last_trunk_tokens() const { return aggregator_.trunk_tokens(); }

 private:
  // The camera head's K/V cache (one row per cached frame and slot, 256 KB a frame in F32) is
  // stored in the compute dtype: bf16 halves it and the bytes its attention reads per frame.
  static DType camera_cache_dtype(const ModelConfig& config) { return config.compute; }
  Backend& backend_;
  ModelConfig cfg_;
  ProfileTotals profile_;
  Aggregator aggregator_;
  CameraHead camera_;
  DepthHead depth_;
  PlaceDescriptor descriptor_;
  const std::array<Tensor, 4>* layers_ = nullptr;
  Tensor images_;  // the step's normalized frames on the device
  Tensor cam_tokens_;
  // One step at a time reaches the backend; the buffers above belong to the step running.
  std::mutex mu_;
  // The previous step's shape: frame height and width, then each sequence's frame count.
  std::vector<int64_t> last_shape_;
};

}  // namespace lingbot
