// The aggregator: DINO patch tokens plus 6 special tokens per frame, then 24 pairs of a frame
// block (each frame attends to itself, 2D RoPE) and a global block (attends through the paged
// KV cache, 3D RoPE with time index = stored frames). Emits [frame | global] outputs of the
// selected pairs for the heads.
#pragma once

#include <array>
#include <map>
#include <utility>
#include <vector>

#include "cache/paged_kv.h"
#include "model/block.h"
#include "model/config.h"
#include "model/dino.h"

namespace lingbot {

class ProfileTotals;

// One sequence's part of a step: its `frames` frames are rows of the step's images, in the
// order of the parts; its pages for them are appended to `cache` already
// (SequenceState::begin). `scale_frames` is the sequence's phase-1 frame count.
struct AggregatorPart {
  PagedKVCache* cache = nullptr;
  int64_t scale_frames = 0;
  int64_t frames = 0;
};

class Aggregator {
 public:
  void load(WeightLoader& w, const ModelConfig& cfg);

  // Queues one step over S frames (images [S, 3, H, W], normalized, on the backend).
  // The step's pages must be appended to `cache` already (SequenceState::begin); each global
  // layer stores the frames' K/V there and attends through it. `scale_frames` is the
  // sequence's phase-1 frame count. Returns the emitted layers, each [S, P, 2C], valid until
  // the next call.
  const std::array<Tensor, 4>& enqueue(Backend& b, const Tensor& images, PagedKVCache& cache,
                                       int64_t scale_frames);
  // The same over the frames of several sequences at once (images [sum of frames, 3, H, W]):
  // every token row goes through the same linear layers, and each sequence's global attention
  // reads its own cache. A part's rows get what its sequence would get in a step of its own.
  const std::array<Tensor, 4>& enqueue(Backend& b, const Tensor& images,
                                       const std::vector<AggregatorPart>& parts);

  const ModelConfig& config() const { return cfg_; }
  // Where the stages' times go when profiling (util/profile.h): the owning model's totals.
  void set_profile(ProfileTotals* totals) { profile_ = totals; }
  // The DINO trunk's output of the last call, [S, 1 + R + Np, C] (cls, registers, patches),
  // valid until the next call: the place descriptor pools it.
  const Tensor& trunk_tokens() const { return *trunk_; }
  // Frees the activations kept per call shape (phase 1's are the largest), so that the next
  // shape's buffers and the growing caches can reuse the memory.
  void release_buffers() {
    work_.clear();
    dino_.release_buffers();
  }

  // For the memory preflight, the DINO trunk included: what load reads, and what a call over
  // `frames` frames of height x width allocates (and keeps for that shape).
  static ParamCount parameters(const ModelConfig& cfg);
  static size_t work_bytes_for(const ModelConfig& cfg, int64_t frames, int64_t height,
                               int64_t width);

 private:
  ModelConfig cfg_;
  DinoTrunk dino_;
  const Tensor* trunk_ = nullptr;
  ProfileTotals* profile_ = nullptr;
  // Special tokens [6, C] for each (camera/register variant, scale variant).
  std::array<std::array<Tensor, 2>, 2> specials_;
  std::vector<BlockWeights> frame_blocks_, global_blocks_;

  struct Work {
    Tensor x, frame_out;
    std::array<Tensor, 4> emitted;
    Rope rope2d;
    BlockBuffers buf;
  };
  std::map<std::pair<int64_t, int64_t>, Work> work_;     // (frames, tokens per frame)
  std::vector<std::vector<KVSegment>> attention_lists_;  // this step's attention plan
};

}  // namespace lingbot
