#include "model/dino.h"

#include <algorithm>
#include <cmath>

#include "lingbot/error.h"

namespace lingbot {
namespace {

// One axis of the antialiased bicubic resize: for each output index, the first input index and
// the normalized taps.
struct AxisTaps {
  std::vector<int64_t> first;
  std::vector<std::vector<float>> taps;
};

float keys_cubic(float s) {
  constexpr float a = -0.5f;
  s = std::fabs(s);
  if (s < 1.f) return ((a + 2.f) * s - (a + 3.f)) * s * s + 1.f;
  if (s < 2.f) return (((s - 5.f) * s + 8.f) * s - 4.f) * a;
  return 0.f;
}

AxisTaps aa_bicubic_taps(int64_t n_in, int64_t n_out) {
  AxisTaps t;
  const float scale = static_cast<float>(n_in) / static_cast<float>(n_out);
  const float support = scale >= 1.f ? 2.f * scale : 2.f;
  const float invscale = scale >= 1.f ? 1.f / scale : 1.f;
  for (int64_t i = 0; i < n_out; ++i) {
    const float center = scale * (static_cast<float>(i) + 0.5f);
    const int64_t lo = std::max<int64_t>(static_cast<int64_t>(center - support + 0.5f), 0);
    const int64_t hi = std::min<int64_t>(static_cast<int64_t>(center + support + 0.5f), n_in);
    std::vector<float> w(hi - lo);
    float total = 0.f;
    for (int64_t j = 0; j < hi - lo; ++j) {
      w[j] = keys_cubic((static_cast<float>(j + lo) - center + 0.5f) * invscale);
      total += w[j];
    }
    for (float& v : w) v = total != 0.f ? v / total : 0.f;
    t.first.push_back(lo);
    t.taps.push_back(std::move(w));
  }
  return t;
}

}  // namespace

Tensor resize_pos_grid(const Tensor& table, int64_t grid, int64_t gh, int64_t gw) {
  const int64_t c = table.dim(-1);
  LINGBOT_CHECK(table.numel() == grid * grid * c, "position grid has the wrong size");
  const AxisTaps ty = aa_bicubic_taps(grid, gh), tx = aa_bicubic_taps(grid, gw);
  Tensor out = Tensor::zeros({gh * gw, c});
  const float* in = table.f32();
  std::vector<float> row(c);
  for (int64_t y = 0; y < gh; ++y)
    for (int64_t x = 0; x < gw; ++x) {
      float* o = out.f32() + (y * gw + x) * c;
      for (size_t r = 0; r < ty.taps[y].size(); ++r) {
        std::fill(row.begin(), row.end(), 0.f);
        const int64_t iy = ty.first[y] + static_cast<int64_t>(r);
        for (size_t q = 0; q < tx.taps[x].size(); ++q) {
          const float* src = in + (iy * grid + tx.first[x] + static_cast<int64_t>(q)) * c;
          const float wq = tx.taps[x][q];
          for (int64_t ch = 0; ch < c; ++ch) row[ch] += wq * src[ch];
        }
        const float wr = ty.taps[y][r];
        for (int64_t ch = 0; ch < c; ++ch) o[ch] += wr * row[ch];
      }
    }
  return out;
}

void DinoTrunk::load(WeightLoader& w, const ModelConfig& cfg) {
  cfg_ = cfg;
  const int64_t c = cfg.dim, r = cfg.registers, p = cfg.patch;
  const std::string pre = "aggregator.patch_embed.";
  Tensor cls = w.get_host(pre + "cls_token", {1, 1, c});
  Tensor reg = w.get_host(pre + "register_tokens", {1, r, c});
  Tensor prefix = Tensor::zeros({1 + r, c});
  std::copy_n(cls.f32(), c, prefix.f32());
  std::copy_n(reg.f32(), r * c, prefix.f32() + c);
  prefix_ = w.backend().upload(prefix, DType::F32);
  pos_host_ =
      w.get_host(pre + "pos_embed", {1, 1 + cfg.pos_grid * cfg.pos_grid, c}).reshape({-1, c});
  w.ignore(pre + "mask_token");  // only used in training
  patch_w_ =
      w.get(pre + "patch_embed.proj.weight", {c, 3, p, p}, cfg.compute).reshape({c, 3 * p * p});
  patch_b_ = w.get(pre + "patch_embed.proj.bias", {c});
  blocks_.resize(cfg.dino_depth);
  for (int64_t i = 0; i < cfg.dino_depth; ++i)
    blocks_[i].load(w, pre + "blocks." + std::to_string(i), c, c * cfg.mlp_ratio, cfg.head_dim(),
                    /*with_qk_norm=*/false, 1e-6f, cfg.compute);
  norm_w_ = w.get(pre + "norm.weight", {c});
  norm_b_ = w.get(pre + "norm.bias", {c});
}

ParamCount DinoTrunk::parameters(const ModelConfig& cfg) {
  const int64_t c = cfg.dim, p = cfg.patch;
  ParamCount n;
  // cls, registers, pos_embed (1 + G*G), patch bias, final norm; the mask token is not read.
  n.f32 = static_cast<size_t>(c * (1 + cfg.registers + 1 + cfg.pos_grid * cfg.pos_grid + 1 + 2));
  n.compute = static_cast<size_t>(c * 3 * p * p);
  for (int64_t i = 0; i < cfg.dino_depth; ++i)
    n += BlockWeights::parameters(c, c * cfg.mlp_ratio, 0);
  return n;
}

size_t DinoTrunk::work_bytes_for(const ModelConfig& cfg, int64_t s, int64_t height, int64_t width) {
  const int64_t p = cfg.patch, c = cfg.dim, np = (height / p) * (width / p);
  const int64_t nd = 1 + cfg.registers + np;
  const size_t e = dtype_size(cfg.compute);
  const size_t rows = static_cast<size_t>(s * np * 3 * p * p);
  size_t b = rows * 4 + (cfg.compute != DType::F32 ? rows * e : 0);  // rows, rows_c
  b += static_cast<size_t>(s * np * c) * e;                          // patches
  b += static_cast<size_t>(s * nd * c) * 4 * 2;                      // x, out
  b += static_cast<size_t>(nd * c) * 4;  // the position table of this size
  return b;
}

const Tensor& DinoTrunk::position_table(Backend& b, int64_t gh, int64_t gw) {
  auto key = std::make_pair(gh, gw);
  auto it = pos_tables_.find(key);
  if (it != pos_tables_.end()) return it->second;
  const int64_t c = cfg_.dim, r = cfg_.registers, g = cfg_.pos_grid;
  // Rows: cls position, zeros for the registers (they get none), then the patch positions.
  Tensor t = Tensor::zeros({1 + r + gh * gw, c});
  std::copy_n(pos_host_.f32(), c, t.f32());
  Tensor grid = pos_host_.slice(1, 1 + g * g);
  Tensor patches = (gh == g && gw == g) ? grid : resize_pos_grid(grid, g, gh, gw);
  std::copy_n(patches.f32(), gh * gw * c, t.f32() + (1 + r) * c);
  return pos_tables_[key] = b.upload(t, DType::F32);
}

const Tensor& DinoTrunk::enqueue(Backend& b, const Tensor& images, const BlockBuffers& blocks) {
  const int64_t s = images.dim(0), p = cfg_.patch, c = cfg_.dim, r = cfg_.registers;
  const int64_t gh = images.dim(2) / p, gw = images.dim(3) / p, np = gh * gw, nd = 1 + r + np;
  Work& wk = work_[{s, nd}];
  if (!wk.x.defined()) {
    wk.rows = b.alloc({s * np, 3 * p * p}, DType::F32);
    wk.rows_c = cfg_.compute == DType::F32 ? wk.rows : b.alloc({s * np, 3 * p * p}, cfg_.compute);
    wk.patches = b.alloc({s, np, c}, cfg_.compute);
    wk.x = b.alloc({s, nd, c}, DType::F32);
    wk.out = b.alloc({s, nd, c}, DType::F32);
  }
  LINGBOT_CHECK(blocks.h.dim(-1) == c && blocks.hidden.dim(-1) == c * cfg_.mlp_ratio &&
                    blocks.h.dtype() == cfg_.compute,
                "dino: lent block buffers of another width or dtype");
  BlockBuffers buf = blocks.first_rows(s * nd);
  b.patchify(images, static_cast<int>(p), wk.rows);
  if (cfg_.compute != DType::F32) b.copy(wk.rows, wk.rows_c);
  b.linear(wk.rows_c, patch_w_, &patch_b_, wk.patches);
  for (int64_t f = 0; f < s; ++f) {
    Tensor head = wk.x[f].slice(0, 1 + r), body = wk.x[f].slice(1 + r, nd);
    b.copy(prefix_, head);
    b.copy(wk.patches[f], body);
  }
  b.add(wk.x, position_table(b, gh, gw));
  Tensor x = wk.x.reshape({s * nd, c});
  const float scale = 1.0f / std::sqrt(static_cast<float>(cfg_.head_dim()));
  // Each frame attends to its own tokens, in the same buffers in every block: one plan.
  const int64_t h = cfg_.heads, d = cfg_.head_dim();
  Tensor k4 = buf.k.reshape({s, nd, h, d}), v4 = buf.v.reshape({s, nd, h, d});
  std::vector<std::vector<KVSegment>> frames(s);
  for (int64_t f = 0; f < s; ++f)
    frames[f] = {{k4[f].raw(), v4[f].raw(), static_cast<int32_t>(nd)}};
  b.plan_attention(frames);
  AttendFn per_frame = [&](const Tensor& q, const Tensor& k, const Tensor& v, Tensor& out) {
    LINGBOT_CHECK(k.raw() == buf.k.raw() && v.raw() == buf.v.raw(),
                  "dino: attention outside the planned buffers");
    Tensor q4 = q.reshape({s, nd, h, d}), o4 = out.reshape({s, nd, h, d});
    for (int64_t f = 0; f < s; ++f) {
      Tensor of = o4[f];
      b.attention_planned(q4[f], static_cast<int>(f), scale, of);
    }
  };
  for (auto& blk : blocks_) enqueue_block(b, blk, x, buf, nullptr, per_frame);
  b.layer_norm(wk.x, &norm_w_, &norm_b_, 1e-6f, wk.out);
  return wk.out;
}

}  // namespace lingbot
