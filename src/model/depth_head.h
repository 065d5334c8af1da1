// DPT depth head: four aggregator layers are projected, resampled to a feature
// pyramid at 1/4 .. 1/28 of the image, fused coarse to fine, and decoded to per-pixel depth and
// confidence. Stateless: each frame on its own, several at a time in one batch.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "backend/ops.h"
#include "model/config.h"
#include "model/weight_loader.h"

namespace lingbot {

class ProfileTotals;

struct DepthHeadConfig {
  int64_t dim_in = 2048;  // 2C
  int64_t features = 256;
  std::array<int64_t, 4> out_channels{256, 512, 1024, 1024};
  int64_t head_hidden = 32;  // width of output_conv2.0, fixed in the reference
  int64_t out_dim = 2;       // depth logit, confidence logit
  int patch = 14;
  DType matrices = DType::F32;  // the projections' weights: the transformer's compute dtype
};

// A convolution's parameters; `b` is undefined for the bias-less scratch convs.
struct ConvWeights {
  Tensor w, b;
};

// Keys `resConfUnit{1,2}.conv{1,2}.weight/.bias`: two 3×3 features→features convs.
struct ResidualConvUnitWeights {
  ConvWeights conv1, conv2;
};

// Keys under `scratch.refinenet{k}.`; refinenet4 has no resConfUnit1 (no finer-level input).
struct FusionBlockWeights {
  bool has_residual = true;
  ResidualConvUnitWeights rcu1, rcu2;  // resConfUnit1, resConfUnit2
  ConvWeights out_conv;                // out_conv 1×1 features→features
};

// Keys under `depth_head.`.
struct DepthHeadWeights {
  Tensor norm_w, norm_b;                // norm.weight / .bias [dim_in], shared by all 4 layers
  std::array<ConvWeights, 4> projects;  // projects.{l}: 1×1 conv, kept as Linear [C_l, dim_in]
  ConvWeights resize0;                  // resize_layers.0: ConvTranspose k4 s4 [C0, C0, 4, 4]
  ConvWeights resize1;                  // resize_layers.1: ConvTranspose k2 s2 [C1, C1, 2, 2]
  ConvWeights resize3;                  // resize_layers.3: Conv 3×3 s2 p1 [C3, C3, 3, 3]
  std::array<Tensor, 4> layer_rn;       // scratch.layer{l+1}_rn.weight [features, C_l, 3, 3]
  std::array<FusionBlockWeights, 4> refinenet;  // [k] = scratch.refinenet{k+1}
  ConvWeights output_conv1;                     // scratch.output_conv1 [features/2, features, 3, 3]
  ConvWeights output_conv2a;  // scratch.output_conv2.0 [head_hidden, features/2, 3, 3]
  ConvWeights output_conv2b;  // scratch.output_conv2.2 [out_dim, head_hidden, 1, 1]
};

struct DepthOutput {
  Tensor depth;  // host F32 [S, H, W], exp(logit 0)
  Tensor conf;   // host F32 [S, H, W], 1 + exp(logit 1)
};

// The UV positional embedding added to a [channels, h, w] map of an H×W image, already
// multiplied by `ratio`: host F32 [1, channels, h, w].
Tensor uv_pos_embed(int64_t h, int64_t w, int64_t channels, double aspect_ratio, float ratio);

class DepthHead {
 public:
  void load(WeightLoader& loader, const DepthHeadConfig& cfg);
  const DepthHeadConfig& config() const { return cfg_; }
  // Where the stages' times go when profiling (util/profile.h): the owning model's totals.
  void set_profile(ProfileTotals* totals) { profile_ = totals; }

  // layers: the 4 emitted aggregator layers, each [S, T, dim_in] on the backend, patch tokens
  // last. H, W: image size, multiples of the patch size. Up to `batch` frames go through each
  // op together: fewer, larger launches (the coarse levels' convolutions are small for one
  // frame) for `batch` times the plan's memory. The results do not depend on it beyond the
  // rounding of a GEMM over more rows.
  DepthOutput run(Backend& be, const std::array<Tensor, 4>& layers, int H, int W,
                  int64_t batch = 1);
  // The same, queued only: depth and confidence of frame s land at depth[s] and conf[s] (H*W
  // floats each, host memory from Backend::alloc_host) once a later fence has passed.
  void enqueue(Backend& be, const std::array<Tensor, 4>& layers, int H, int W,
               const std::vector<float*>& depth, const std::vector<float*>& conf,
               int64_t batch = 1);

  // Frees the work buffers (kept for the largest batch so far) until the next call; the
  // positional embeddings stay.
  void release_buffers();

  // For the memory preflight: what load reads; the plan for H x W images (kept while that size
  // runs); the largest scratch one of its convolutions asks of the backend.
  static ParamCount parameters(const DepthHeadConfig& cfg);
  // The plan of one frame; a batch of n frames takes n times its work buffers.
  static size_t plan_bytes_for(const DepthHeadConfig& cfg, int64_t H, int64_t W);
  static size_t scratch_bytes_for(const DepthHeadConfig& cfg, int64_t H, int64_t W);
  // The largest upsampled image (F32, one frame) the output stage's Backend::upsample_conv2d
  // holds during the call where the backend does not fuse the two (the CPU, float32 on the GPU).
  static size_t upsampled_bytes_for(const DepthHeadConfig& cfg, int64_t H, int64_t W);

 private:
  // Buffers for a batch of frames at one resolution, and the positional embeddings they share.
  // The arena holds `capacity` frames; the views below are placed for the current batch.
  struct Plan {
    int H = 0, W = 0;
    int64_t ph = 0, pw = 0;
    int64_t capacity = 0, frames = 0;
    std::array<Tensor, 4> pos;   // 0.1 · embed [1, C_l, ph, pw]
    Tensor pos_out;              // 0.1 · embed [1, features/2, H, W]
    Tensor xn;                   // [frames * P, dim_in]
    std::array<Tensor, 4> rows;  // projections as rows [frames * P, C_l]
    std::array<Tensor, 4> proj;  // [frames, C_l, ph, pw]; the maps below are [frames, ...] too
    Tensor resized0, resized1, resized3;
    std::array<Tensor, 4> r;      // layer_rn outputs, pyramid level l
    std::array<Tensor, 4> tmp;    // at level l: the RCUs' inner activation, then out_conv's output
    std::array<Tensor, 4> fused;  // refinenet{l+1}'s output, upsampled to the next finer level
    Tensor low0;                  // refinenet1's output before upsampling (fused[0] is never made)
    Tensor o1, o2, logits;
    Tensor arena;  // the memory of every work tensor above (see place)
  };
  // Makes the plan hold a batch of `frames` at H x W (growing its arena only past its capacity).
  void plan_for(Backend& be, int H, int W, int64_t frames);
  // The plan's work tensors for `frames` frames as views of one allocation: their offsets in
  // floats, the total returned (`arena` undefined: sizes only, `pl` untouched). The output stage
  // (o1 to logits) runs once everything but low0 is dead, so it reuses the memory of the
  // projections and the refinenets instead of taking its own.
  static int64_t place(const DepthHeadConfig& cfg, int64_t H, int64_t W, int64_t frames,
                       const Tensor& arena, Plan& pl);
  void residual_conv_unit(Backend& be, const ResidualConvUnitWeights& w, Tensor& x, Tensor& tmp);
  void fusion_block(Backend& be, const FusionBlockWeights& w, Tensor& a, Tensor* b, Tensor& tmp,
                    Tensor& low);
  // Frames first .. first + plan_.frames - 1 of the layers.
  void run_batch(Backend& be, const std::array<Tensor, 4>& layers, int64_t first,
                 const std::vector<float*>& depth, const std::vector<float*>& conf);

  DepthHeadConfig cfg_;
  DepthHeadWeights w_;
  Plan plan_;
  ProfileTotals* profile_ = nullptr;
};

}  // namespace lingbot
