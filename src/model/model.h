// The whole network for one forward call: aggregator, camera head, depth head.
#pragma once

#include <array>
#include <deque>
#include <memory>

#include "cache/camera_cache.h"
#include "cache/paged_kv.h"
#include "lingbot/engine.h"
#include "model/aggregator.h"
#include "model/camera_head.h"
#include "model/depth_head.h"

namespace lingbot {

// The paged KV cache a model of `config` (its compute dtype included) needs for frames of
// height x width streamed with `options`.
KVCacheConfig kv_cache_config(const ModelConfig& config, int64_t height, int64_t width,
                              const StreamOptions& options);

class Model {
 public:
  Model(Backend& backend, WeightLoader& weights, const ModelConfig& config);

  struct Output {
    Tensor pose_enc;  // host [S, 9]
    Tensor depth;     // host [S, H, W]
    Tensor conf;      // host [S, H, W]
  };
  // One call over S frames. store = false runs a non-keyframe: its aggregator K/V are appended
  // with eviction deferred (the caller rolls them back) and the camera head stores nothing.
  Output forward(const Tensor& images01, PagedKVCache& kv, CameraCache& camera,
                 int64_t scale_frames, bool store, int camera_iterations);

  // How one call treats the two caches. Flow-based keyframes are decided only after the pass,
  // so such a call keeps both options open: aggregator eviction deferred and the camera head
  // storing, after which the caller commits, or rolls back both caches.
  struct Step {
    bool defer_eviction = false;
    bool store_camera = true;
  };
  Output forward(const Tensor& images01, PagedKVCache& kv, CameraCache& camera,
                 int64_t scale_frames, Step step, int camera_iterations);

  // forward() in two halves, so the host can prepare the next call while the device computes:
  // enqueue queues a call (at most two may be outstanding) and collect returns the oldest one's
  // outputs. The tensors collect returns live in the call's host slot: valid until the
  // next-but-one enqueue.
  void enqueue(const Tensor& images01, PagedKVCache& kv, CameraCache& camera, int64_t scale_frames,
               Step step, int camera_iterations);
  Output collect();
  int64_t in_flight() const { return static_cast<int64_t>(queued_.size()); }

  CameraCache make_camera_cache(int iterations) const;

  const ModelConfig& config() const { return cfg_; }
  Backend& backend() { return backend_; }
  // The emitted aggregator layers of the last call (for parity tests).
  const std::array<Tensor, 4>& last_layers() const { return *layers_; }

 private:
  Backend& backend_;
  ModelConfig cfg_;
  Aggregator aggregator_;
  CameraHead camera_;
  DepthHead depth_;
  const std::array<Tensor, 4>* layers_ = nullptr;
  Tensor cam_tokens_;

  // Host side of one queued call: its normalized input and its outputs, in memory the device
  // copies to and from asynchronously.
  struct Slot {
    Tensor input, pose, depth, conf;
    Tensor images;  // the input on the device
    int64_t frames = 0, height = 0, width = 0;
    uint64_t fence = 0;
  };
  std::array<Slot, 2> slots_;
  int next_slot_ = 0;
  std::deque<int> queued_;
  Shape last_shape_;  // of the previous call's input
};

}  // namespace lingbot
