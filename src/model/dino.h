// The DINOv2 ViT trunk ("patch_embed" in checkpoints): patchify, cls + registers + learned
// positions, pre-norm blocks without RoPE, final LayerNorm; yields per-frame patch tokens.
#pragma once

#include <map>
#include <utility>
#include <vector>

#include "model/block.h"
#include "model/config.h"

namespace lingbot {

// Antialiased bicubic resize (Keys a = -0.5, support widened by the downscale factor, taps
// renormalized) of a [grid*grid, C] table to [gh*gw, C], float32 — what PyTorch's
// interpolate(..., mode="bicubic", antialias=True) does to the learned position grid.
Tensor resize_pos_grid(const Tensor& grid_table, int64_t grid, int64_t gh, int64_t gw);

class DinoTrunk {
 public:
  void load(WeightLoader& w, const ModelConfig& cfg);
  // images [S, 3, H, W] normalized, on the backend. Returns [S, 5 + Np, C] after the final
  // norm (cls, registers, patches); the caller keeps the patch rows. `blocks`: block buffers of
  // this width with at least S (5 + Np) rows, lent by the caller for this call (the aggregator's,
  // idle while the trunk runs), so the trunk keeps none of its own.
  const Tensor& enqueue(Backend& b, const Tensor& images, const BlockBuffers& blocks);

  void release_buffers() { work_.clear(); }  // activations kept per call shape

  // For the memory preflight: what load reads, and what a call over `frames` frames of
  // height x width allocates (and keeps for that shape), the lent block buffers not counted.
  static ParamCount parameters(const ModelConfig& cfg);
  static size_t work_bytes_for(const ModelConfig& cfg, int64_t frames, int64_t height,
                               int64_t width);

 private:
  const Tensor& position_table(Backend& b, int64_t gh, int64_t gw);

  ModelConfig cfg_;
  Tensor prefix_;             // [1 + R, C]: cls_token, register_tokens
  Tensor pos_host_;           // aggregator.patch_embed.pos_embed [1 + G*G, C] (host)
  Tensor patch_w_, patch_b_;  // patch_embed.proj: [C, 3*p*p], [C]
  std::vector<BlockWeights> blocks_;
  Tensor norm_w_, norm_b_;
  std::map<std::pair<int64_t, int64_t>, Tensor> pos_tables_;  // (gh, gw) -> [1 + R + Np, C]
  // Per batch size: activations.
  struct Work {
    Tensor rows, rows_c, patches, x, out;  // rows_c: rows in the compute dtype
  };
  std::map<std::pair<int64_t, int64_t>, Work> work_;  // (frames, tokens)
};

}  // namespace lingbot
