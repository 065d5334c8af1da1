// Hyperparameters of a LingBot-Map model: presets and inference from checkpoint shapes.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

#include "weights/tensor_map.h"

namespace lingbot {

// Parameters of a model part by storage dtype, for the memory preflight.
struct ParamCount {
  size_t compute = 0;  // stored in ModelConfig::compute (the transformer matrices)
  size_t f32 = 0;      // everything else
  // Not parameters of their own: the bf16 copies of F32 convolution weights that the GPU packs
  // once when it computes in reduced precision (scratch::conv_packed_elems).
  size_t packed = 0;
  size_t total() const { return compute + f32; }
  size_t bytes(DType compute_dtype) const {
    return compute * dtype_size(compute_dtype) + f32 * 4 +
           (compute_dtype == DType::F32 ? 0 : packed * 2);
  }
  ParamCount& operator+=(const ParamCount& o) {
    compute += o.compute;
    f32 += o.f32;
    packed += o.packed;
    return *this;
  }
};

struct ModelConfig {
  std::string arch = "lingbot-map";
  int64_t dim = 1024;  // aggregator and DINO width C
  int64_t heads = 16;  // aggregator and DINO heads (head_dim = dim / heads = 64)
  int64_t depth = 24;  // frame/global block pairs
  int64_t dino_depth = 24;
  int64_t mlp_ratio = 4;
  int64_t registers = 4;  // DINO register tokens; the aggregator has 4 as well
  int64_t patch = 14;
  int64_t pos_grid = 37;      // learned DINO position grid (img_size 518 / 14)
  int64_t camera_heads = 16;  // camera head width is 2C
  int64_t dpt_features = 256;
  std::array<int64_t, 4> dpt_out = {256, 512, 1024, 1024};
  std::array<int64_t, 4> selected = {4, 11, 17, 23};  // emitted block pairs
  float rope_freq = 100.f;                            // 2D RoPE base (frame blocks)
  // Dtype of the transformer matrices, GEMM outputs, attention and the KV cache. The residual
  // streams, norms and both heads stay F32 (as the reference under autocast).
  DType compute = DType::F32;
  // The global layers' KV cache in e4m3 with per-head scales (precision "fp8") instead of the
  // compute dtype: half the bytes of bf16.
  bool kv_fp8 = false;

  int64_t head_dim() const { return dim / heads; }
  static constexpr int64_t kSpecialTokens = 6;  // camera, 4 registers, scale

  static ModelConfig preset(const std::string& name);  // "lingbot-map" or "tiny"
  // The preset whose shapes the checkpoint carries; Error if none fits.
  static ModelConfig infer(const TensorMap& tensors);
};

// EngineOptions::precision on a CPU or a GPU: "f32", "bf16" (GPU only: bf16 transformer and KV
// cache), "fp8" (the KV cache in e4m3, the rest as "auto"; where `reads_fp8_kv`) or "auto" (f32
// on the CPU; on the GPU bf16, with the KV cache in e4m3 where the GPU reads it). Sets `compute`
// and `kv_fp8`; an unknown or unsupported name is an InvalidArgument error.
void resolve_precision(const std::string& precision, bool cuda, bool reads_fp8_kv,
                       ModelConfig& config);

}  // namespace lingbot
