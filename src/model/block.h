// The pre-norm transformer block shared by the DINO trunk, the frame blocks and the global
// blocks: x += ls1 * proj(attn(LN1 x)); x += ls2 * fc2(GELU(fc1(LN2 x))). What differs between
// them (which keys a query sees, the rotary scheme, qk-norm) is passed in. The LayerScales are
// folded into proj and fc2 at load time (ls * (W h + b) = (ls W) h + ls b), so each residual
// update is one linear_add.
#pragma once

#include <functional>
#include <optional>
#include <string>

#include "backend/ops.h"
#include "model/config.h"
#include "model/weight_loader.h"

namespace lingbot {

struct BlockWeights {
  Tensor norm1_w, norm1_b;                        // {prefix}.norm1.{weight,bias}
  Tensor qkv_w, qkv_b;                            // {prefix}.attn.qkv.{weight,bias}  [3C, C]
  Tensor q_norm_w, q_norm_b, k_norm_w, k_norm_b;  // {prefix}.attn.{q,k}_norm.* [head_dim], optional
  Tensor proj_w, proj_b;                          // {prefix}.attn.proj.*, times ls1.gamma
  Tensor norm2_w, norm2_b;                        // {prefix}.norm2.{weight,bias}
  Tensor fc1_w, fc1_b;                            // {prefix}.mlp.fc1.{weight,bias}
  Tensor fc2_w, fc2_b;                            // {prefix}.mlp.fc2.*, times ls2.gamma
  bool qk_norm = false;
  float eps = 1e-5f;  // norm1/norm2 (DINO: 1e-6); qk-norm is always 1e-5

  void load(WeightLoader& w, const std::string& prefix, int64_t dim, int64_t hidden,
            int64_t head_dim, bool with_qk_norm, float norm_eps, DType matrix_dtype);
  // What load reads: the four matrices in the compute dtype, the rest F32; qk_norm_dim 0 = none.
  static ParamCount parameters(int64_t dim, int64_t hidden, int64_t qk_norm_dim);
};

// Activation buffers for one block over M rows, reused across blocks and steps. q, k, v and the
// attention output are in `attention` (default: `dtype`), the dtype of the keys they meet.
struct BlockBuffers {
  Tensor h, qkv, q, k, v, attn, hidden;
  void ensure(Backend& b, int64_t rows, int64_t dim, int64_t hidden_dim, int64_t heads,
              DType dtype = DType::F32, std::optional<DType> attention = std::nullopt);
  static size_t bytes_for(int64_t rows, int64_t dim, int64_t hidden_dim, DType dtype,
                          std::optional<DType> attention = std::nullopt);
  // The same buffers for their first `m` rows (m <= rows): another stack of blocks of the same
  // width that runs before or after this one in the step can borrow them.
  BlockBuffers first_rows(int64_t m) const;
  int64_t rows = -1;
};

// attend(q, k, v, out): q/k/v/out [M, H, D]; decides which keys each query reads.
using AttendFn =
    std::function<void(const Tensor& q, const Tensor& k, const Tensor& v, Tensor& out)>;

// With `kv_into`, the block's K/V go straight into that cache storage (see Backend::split_qkv)
// and `attend` must not store them again.
void enqueue_block(Backend& b, const BlockWeights& w, Tensor& x, BlockBuffers& buf,
                   const Rope* rope, const AttendFn& attend,
                   const KVDestination* kv_into = nullptr);

}  // namespace lingbot
