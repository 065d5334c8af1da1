// One sequence's state between its steps, and the step transaction over it.
//
// A SequenceState owns everything a sequence keeps from frame to frame: the paged KV cache of
// the aggregator's global layers, the camera head's caches, and the host slots of the steps it
// has queued on the device. Its configuration is derived once, from the model and the stream
// options, when the first frame fixes the size. The model runs a step on a state it is given;
// nothing about a sequence lives in the model, so sequences of one model are independent.
//
// Life of a step:
//   begin(frames, mode)  pages for the new frames; the camera caches trimmed to their limit
//   ... the model stores each layer's K/V and the camera tokens as it runs ...
//   queued()             the step is on the device: Keep commits, Attend rolls back
//   decide(keep)         Tentative steps only, once their results are known
//   abort()              the step failed before queued(): nothing of it persists
#pragma once

#include <array>
#include <cstdint>
#include <deque>
#include <memory>

#include "cache/camera_cache.h"
#include "cache/paged_kv.h"
#include "lingbot/engine.h"
#include "model/config.h"

namespace lingbot {

class Model;

struct SequenceConfig {
  int64_t height = 0, width = 0;  // model input, pixels
  KVCacheConfig kv;
  CameraCacheLimit camera_limit;  // none unless the special stream is capped
  int camera_iterations = 4;
  bool descriptors = false;  // each step also returns its frames' place descriptors
};

// The configuration a sequence of frames of height x width streamed with `options` needs on a
// model of `config` (its compute dtype included).
SequenceConfig sequence_config(const ModelConfig& config, int64_t height, int64_t width,
                               const StreamOptions& options);
inline KVCacheConfig kv_cache_config(const ModelConfig& config, int64_t height, int64_t width,
                                     const StreamOptions& options) {
  return sequence_config(config, height, width, options).kv;
}
// The camera-head cache limit that goes with StreamOptions::max_special_frames (none when 0).
CameraCacheLimit camera_limit(const StreamOptions& options);

// How a step treats the caches.
enum class StepMode {
  Keep,       // a keyframe: evicts before it attends, stored for good
  Attend,     // a non-keyframe: attends, then nothing of it stays
  Tentative,  // decided after its results (adaptive keyframes): stored in both caches with the
              // eviction held back, then decide(keep)
};

// What a sequence's caches reserve, for the memory preflight.
struct SequenceBytes {
  size_t kv = 0;              // the paged KV cache, all global layers, special stream included
  size_t special_stream = 0;  // part of kv: the evicted frames' special tokens
  size_t camera = 0;          // the camera head's caches
};

class SequenceState {
 public:
  SequenceState(const Model& model, const SequenceConfig& config);
  SequenceState(const SequenceState&) = delete;
  SequenceState& operator=(const SequenceState&) = delete;

  // What the caches of a sequence of `config` on a model of `model` reserve once `stored` frames
  // are stored (scale frames and keyframes).
  static SequenceBytes bytes_for(const ModelConfig& model, const SequenceConfig& config,
                                 int64_t stored);

  const SequenceConfig& config() const { return cfg_; }
  PagedKVCache& kv() { return kv_; }
  const PagedKVCache& kv() const { return kv_; }
  CameraCache& camera() { return camera_; }
  const CameraCache& camera() const { return camera_; }
  // Frames of the sequence's first step (phase 1), once it has begun; 0 before.
  int64_t scale_frames() const { return scale_frames_; }

  // A resumed sequence: its caches were restored with this many frames in its first step.
  void restored(int64_t scale_frames) { scale_frames_ = scale_frames; }

  void begin(int64_t frames, StepMode mode);
  bool step_open() const { return open_; }
  bool stores_camera() const { return mode_ != StepMode::Attend; }
  void queued();
  void decide(bool keep);
  void abort();
  // Empties both caches: a new sequence of the same size. Steps still queued must have been
  // collected.
  void reset();

  // Host side of one queued step: its normalized input and its outputs, in memory the device
  // copies to and from asynchronously. At most two steps of a sequence are queued at once.
  struct Slot {
    Tensor input, pose, depth, conf;
    Tensor descriptor;  // the pooled trunk tokens [frames, width, 2], when the sequence asks
    int64_t frames = 0;
    uint64_t fence = 0;
  };
  Slot& next_slot();   // the slot the next step fills
  void push_queued();  // that slot's step is queued
  Slot& oldest_queued();
  void pop_queued();
  int64_t steps_queued() const { return static_cast<int64_t>(queued_.size()); }

 private:
  SequenceConfig cfg_;
  PagedKVCache kv_;
  CameraCache camera_;
  int64_t scale_frames_ = 0;
  bool open_ = false;  // between begin() and queued()/abort(), or a Tentative step's decide()
  StepMode mode_ = StepMode::Keep;
  int64_t camera_rows_ = 0;  // before the open step
  std::array<Slot, 2> slots_;
  int next_slot_ = 0;
  std::deque<int> queued_;
};

}  // namespace lingbot
