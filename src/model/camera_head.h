// CameraCausalHead: iterative pose refinement from each frame's camera token, with
// a per-(iteration, block) K/V cache of one token per frame so a streamed frame attends to every
// cached keyframe.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <span>
#include <utility>
#include <vector>

#include "backend/ops.h"
#include "cache/camera_cache.h"
#include "model/block.h"
#include "model/weight_loader.h"

namespace lingbot {

struct CameraHeadConfig {
  int64_t dim_in = 2048;  // 2C, the aggregator's concatenated frame/global width
  int64_t dim = 2048;     // trunk width; the reference has no input projection, so == dim_in
  int64_t heads = 16;
  int64_t depth = 4;
  int64_t mlp_ratio = 4;
  int64_t pose_dim = 9;  // absT_quaR_FoV
  // Dtype of the trunk's and the modulation's matrices. One frame's head is a chain of GEMVs, so
  // its time is the weights' bytes: bf16 halves it (the rest stays F32).
  DType matrices = DType::F32;
  int64_t head_dim() const { return dim / heads; }
};

// Keys under `camera_head.`.
struct CameraHeadWeights {
  Tensor token_norm_w, token_norm_b;  // token_norm.weight / .bias [dim]
  Tensor trunk_norm_w, trunk_norm_b;  // trunk_norm.weight / .bias [dim]
  Tensor empty_pose;                  // empty_pose_tokens [1, 1, 9]
  Tensor embed_w, embed_b;            // embed_pose.weight [dim, 9] / .bias
  Tensor mod_w, mod_b;                // poseLN_modulation.1.weight [3 dim, dim] / .bias (+1: scale)
  Tensor branch_fc1_w, branch_fc1_b;  // pose_branch.fc1.weight [dim/2, dim] / .bias
  Tensor branch_fc2_w, branch_fc2_b;  // pose_branch.fc2.weight [9, dim/2] / .bias
  // CameraBlocks: the shared pre-norm block (no qk-norm, no RoPE), keys under
  // `camera_head.trunk.{j}.`.
  std::vector<BlockWeights> trunk;
};

// One sequence's frames in a call over several sequences: `frames` consecutive rows of the
// camera tokens, attending through its own cache, stored there first when `store`.
struct CameraPart {
  CameraCache* cache = nullptr;
  int64_t frames = 0;
  bool store = false;
};

class CameraHead {
 public:
  void load(WeightLoader& loader, const CameraHeadConfig& cfg);
  const CameraHeadConfig& config() const { return cfg_; }

  // A cache shaped for this head; `dtype` is the storage dtype the backend wants.
  CameraCache make_cache(Backend& backend, int iterations = 4, DType dtype = DType::F32) const;

  // For the memory preflight: what load reads; what make_cache's cache reserves once `frames`
  // frames are stored; the scratch of a call over `frames` frames.
  static ParamCount parameters(const CameraHeadConfig& cfg);
  // What the backend's scratch takes for this head's ops (it runs on the side queue, whose
  // scratch holds nothing else).
  static size_t backend_scratch_bytes_for(const CameraHeadConfig& cfg, int64_t frames);
  static size_t cache_bytes_for(const CameraHeadConfig& cfg, int iterations, DType dtype,
                                int64_t frames, const CameraCacheLimit& limit);
  static size_t scratch_bytes_for(const CameraHeadConfig& cfg, int64_t frames, DType cache_dtype);

  // camera_tokens [S, dim_in] on the backend: token 0 of every frame of the last emitted layer.
  // store = true (phase 1, keyframes) appends this call's K/V to the cache before attending;
  // store = false attends to the cache plus the current frames and leaves the cache unchanged.
  // Returns host F32 pose_enc [S, 9] of the last iteration, FoV entries ReLU'd.
  Tensor run(Backend& be, const Tensor& camera_tokens, CameraCache& cache, bool store,
             int iterations = 4);
  // The same, queued only: returns the raw pose [S, 9] on the backend (valid until the next
  // call); apply_pose_activation finishes a host copy of it.
  const Tensor& enqueue(Backend& be, const Tensor& camera_tokens, CameraCache& cache, bool store,
                        int iterations = 4);
  // The same over the frames of several sequences at once: the trunk's matrices are read once
  // for all of them (its time is those bytes), each part attends through its own cache. The
  // parts' caches share one dtype and have slots for `iterations`; their rows add up to the
  // tokens'.
  const Tensor& enqueue(Backend& be, const Tensor& camera_tokens, std::span<const CameraPart> parts,
                        int iterations = 4);
  static void apply_pose_activation(float* pose, int64_t frames, int64_t pose_dim = 9);

 private:
  struct Scratch {
    int64_t frames = 0;
    Tensor xhat;              // [S, dim]: token_norm(x)
    Tensor h, n, t;           // [S, dim] residual stream, normed input, temporary
    BlockBuffers block;       // the trunk blocks' activations
    Tensor k_store, v_store;  // current K/V in cache dtype (non-keyframe attention)
    Tensor branch;            // [S, dim/2]
    Tensor pose;              // [S, 9] raw accumulated pose
    Tensor m, mod;            // [S, dim], [S, 3 dim]: SiLU(embed_pose(p)), shift|scale|gate
  };
  // Points s_ at the scratch for `frames` rows, made on first use. One per row count is kept:
  // batches of several sequences vary in size from step to step, and a buffer the side queue
  // may still be reading is never freed under it. Each is small (about 0.2 MB a row).
  void ensure_scratch(Backend& be, int64_t frames, DType cache_dtype);
  // Where trunk block j of `iteration` writes its frames' K/V: a part that stores them appends
  // them to its cache, the others' go to k_store / v_store.
  void destinations(std::span<const CameraPart> parts, int iteration, int j, KVDestination& into);
  // The attention of trunk block j in `iteration`: each part through its cache (and, when it
  // does not store them, its current frames' K/V).
  AttendFn attend_through(Backend& be, std::span<const CameraPart> parts, int iteration, int j);
  // h = gate ⊙ (adaln_norm(xhat) ⊙ (1 + scale) + shift) + xhat, mod [1 or S, 3 dim] holding
  // shift, 1 + scale and gate.
  void modulate(Backend& be, const Tensor& mod);

  CameraHeadConfig cfg_;
  CameraHeadWeights w_;
  Tensor mod0_;  // [1, 3 dim]: iteration 0 conditions on the constant empty pose
  std::map<std::pair<int64_t, DType>, Scratch> scratch_;
  Scratch* s_ = nullptr;
  std::vector<KVSegment> segs_;
  KVDestination into_;
};

}  // namespace lingbot
