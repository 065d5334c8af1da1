#include "model/block.h"

#include <string>

#include "lingbot/error.h"

namespace lingbot {
namespace {

// gamma[r] * t[r, :] for a matrix, gamma[i] * t[i] for a vector; in F32 on the host, rounded
// once to `dtype` on upload.
Tensor scaled_rows(WeightLoader& w, const std::string& name, const Shape& shape,
                   const Tensor& gamma, DType dtype) {
  const Tensor src = w.get_host(name, shape);
  Tensor t = Tensor::zeros(shape);
  const int64_t rows = shape[0], cols = src.numel() / rows;
  const float* s = src.f32();
  const float* g = gamma.f32();
  float* d = t.f32();
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) d[r * cols + c] = g[r] * s[r * cols + c];
  return w.backend().upload(t, dtype);
}

}  // namespace

void BlockWeights::load(WeightLoader& w, const std::string& p, int64_t dim, int64_t hidden,
                        int64_t head_dim, bool with_qk_norm, float norm_eps, DType md) {
  norm1_w = w.get(p + ".norm1.weight", {dim});
  norm1_b = w.get(p + ".norm1.bias", {dim});
  qkv_w = w.get(p + ".attn.qkv.weight", {3 * dim, dim}, md);
  qkv_b = w.get(p + ".attn.qkv.bias", {3 * dim});
  qk_norm = with_qk_norm;
  if (qk_norm) {
    q_norm_w = w.get(p + ".attn.q_norm.weight", {head_dim});
    q_norm_b = w.get(p + ".attn.q_norm.bias", {head_dim});
    k_norm_w = w.get(p + ".attn.k_norm.weight", {head_dim});
    k_norm_b = w.get(p + ".attn.k_norm.bias", {head_dim});
  }
  const Tensor ls1 = w.get_host(p + ".ls1.gamma", {dim});
  proj_w = scaled_rows(w, p + ".attn.proj.weight", {dim, dim}, ls1, md);
  proj_b = scaled_rows(w, p + ".attn.proj.bias", {dim}, ls1, DType::F32);
  norm2_w = w.get(p + ".norm2.weight", {dim});
  norm2_b = w.get(p + ".norm2.bias", {dim});
  fc1_w = w.get(p + ".mlp.fc1.weight", {hidden, dim}, md);
  fc1_b = w.get(p + ".mlp.fc1.bias", {hidden});
  const Tensor ls2 = w.get_host(p + ".ls2.gamma", {dim});
  fc2_w = scaled_rows(w, p + ".mlp.fc2.weight", {dim, hidden}, ls2, md);
  fc2_b = scaled_rows(w, p + ".mlp.fc2.bias", {dim}, ls2, DType::F32);
  eps = norm_eps;
}

ParamCount BlockWeights::parameters(int64_t dim, int64_t hidden, int64_t qk_norm_dim) {
  ParamCount n;
  n.compute = static_cast<size_t>((4 * dim + 2 * hidden) * dim);  // qkv, proj, fc1, fc2
  // norm1 (2), qkv bias (3), proj bias, ls1, norm2 (2), fc1 bias, fc2 bias, ls2; q/k norms.
  // (The model reads ls1 and ls2 and folds them into proj and fc2: the memory counted here is
  // 4 dim bytes a block more than what stays.)
  n.f32 = static_cast<size_t>(11 * dim + hidden + 4 * qk_norm_dim);
  return n;
}

size_t BlockBuffers::bytes_for(int64_t rows, int64_t dim, int64_t hidden_dim, DType dtype,
                               std::optional<DType> attention) {
  // h, qkv (3), hidden; q, k, v, attn; proj and fc2 add into the residual in place.
  return static_cast<size_t>(rows * (4 * dim + hidden_dim)) * dtype_size(dtype) +
         static_cast<size_t>(rows * 4 * dim) * dtype_size(attention.value_or(dtype));
}

void BlockBuffers::ensure(Backend& b, int64_t m, int64_t dim, int64_t hidden_dim, int64_t heads,
                          DType dtype, std::optional<DType> attention) {
  if (rows == m) return;
  const int64_t d = dim / heads;
  const DType at = attention.value_or(dtype);
  h = b.alloc({m, dim}, dtype);
  qkv = b.alloc({m, 3 * dim}, dtype);
  q = b.alloc({m, heads, d}, at);
  k = b.alloc({m, heads, d}, at);
  v = b.alloc({m, heads, d}, at);
  attn = b.alloc({m, heads, d}, at);
  hidden = b.alloc({m, hidden_dim}, dtype);
  rows = m;
}

BlockBuffers BlockBuffers::first_rows(int64_t m) const {
  LINGBOT_CHECK(m >= 0 && m <= rows, "block buffers: " + std::to_string(m) +
                                         " rows borrowed from buffers of " + std::to_string(rows));
  BlockBuffers v;
  v.h = h.slice(0, m);
  v.qkv = qkv.slice(0, m);
  v.q = q.slice(0, m);
  v.k = k.slice(0, m);
  v.v = this->v.slice(0, m);
  v.attn = attn.slice(0, m);
  v.hidden = hidden.slice(0, m);
  v.rows = m;
  return v;
}

void enqueue_block(Backend& b, const BlockWeights& w, Tensor& x, BlockBuffers& buf,
                   const Rope* rope, const AttendFn& attend, const KVDestination* kv_into) {
  const int64_t m = x.dim(0);
  b.layer_norm_linear(x, &w.norm1_w, &w.norm1_b, w.eps, buf.h, w.qkv_w, &w.qkv_b, buf.qkv);
  QKNorm norm{&w.q_norm_w, &w.q_norm_b, &w.k_norm_w, &w.k_norm_b, 1e-5f};
  b.split_qkv(buf.qkv, w.qk_norm ? &norm : nullptr, rope, buf.q, buf.k, buf.v, kv_into);
  attend(buf.q, buf.k, buf.v, buf.attn);
  b.linear_add(buf.attn.reshape({m, -1}), w.proj_w, &w.proj_b, x);
  b.layer_norm_linear(x, &w.norm2_w, &w.norm2_b, w.eps, buf.h, w.fc1_w, &w.fc1_b, buf.hidden,
                      Act::GELU);
  b.linear_add(buf.hidden, w.fc2_w, &w.fc2_b, x);
}

}  // namespace lingbot
