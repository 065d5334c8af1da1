#include "model/aggregator.h"

#include <algorithm>
#include <cmath>

#include "lingbot/error.h"
#include "model/rope.h"
#include "util/profile.h"

namespace lingbot {

ParamCount Aggregator::parameters(const ModelConfig& cfg) {
  ParamCount n = DinoTrunk::parameters(cfg);
  n.f32 += static_cast<size_t>(2 * cfg.dim * (2 + cfg.registers));  // camera, registers, scale
  for (int64_t i = 0; i < 2 * cfg.depth; ++i)
    n += BlockWeights::parameters(cfg.dim, cfg.dim * cfg.mlp_ratio, cfg.head_dim());
  return n;
}

size_t Aggregator::work_bytes_for(const ModelConfig& cfg, int64_t s, int64_t height,
                                  int64_t width) {
  const int64_t c = cfg.dim,
                p = ModelConfig::kSpecialTokens + (height / cfg.patch) * (width / cfg.patch);
  const int64_t m = s * p;
  size_t b = static_cast<size_t>(m * c) * 4 * 2;     // x, frame_out
  b += static_cast<size_t>(m * 2 * c) * 4 * 4;       // emitted
  b += static_cast<size_t>(m * cfg.head_dim()) * 4;  // 2D RoPE cos and sin
  b += static_cast<size_t>(m * cfg.head_dim()) * 4;  // 3D RoPE, uploaded every call
  b += BlockBuffers::bytes_for(m, c, c * cfg.mlp_ratio, cfg.compute);
  // The DINO trunk borrows the block buffers above (same width, fewer rows).
  return b + DinoTrunk::work_bytes_for(cfg, s, height, width);
}

void Aggregator::load(WeightLoader& w, const ModelConfig& cfg) {
  cfg_ = cfg;
  const int64_t c = cfg.dim, r = cfg.registers;
  dino_.load(w, cfg);
  Tensor cam = w.get_host("aggregator.camera_token", {1, 2, 1, c});
  Tensor reg = w.get_host("aggregator.register_token", {1, 2, r, c});
  Tensor scale = w.get_host("aggregator.scale_token", {1, 2, 1, c});
  for (int v = 0; v < 2; ++v)
    for (int sv = 0; sv < 2; ++sv) {
      // Token order within a frame: camera, registers, scale.
      Tensor t = Tensor::zeros({2 + r, c});
      std::copy_n(cam.f32() + v * c, c, t.f32());
      std::copy_n(reg.f32() + v * r * c, r * c, t.f32() + c);
      std::copy_n(scale.f32() + sv * c, c, t.f32() + (1 + r) * c);
      specials_[v][sv] = w.backend().upload(t, DType::F32);
    }
  const int64_t hidden = c * cfg.mlp_ratio;
  frame_blocks_.resize(cfg.depth);
  global_blocks_.resize(cfg.depth);
  for (int64_t i = 0; i < cfg.depth; ++i) {
    frame_blocks_[i].load(w, "aggregator.frame_blocks." + std::to_string(i), c, hidden,
                          cfg.head_dim(), true, 1e-5f, cfg.compute);
    global_blocks_[i].load(w, "aggregator.global_blocks." + std::to_string(i), c, hidden,
                           cfg.head_dim(), true, 1e-5f, cfg.compute);
  }
}

const std::array<Tensor, 4>& Aggregator::enqueue(Backend& b, const Tensor& images,
                                                 PagedKVCache& cache, int64_t scale_frames) {
  return enqueue(b, images, {{&cache, scale_frames, images.dim(0)}});
}

const std::array<Tensor, 4>& Aggregator::enqueue(Backend& b, const Tensor& images,
                                                 const std::vector<AggregatorPart>& parts) {
  const int64_t s = images.dim(0), c = cfg_.dim, h = cfg_.heads, d = cfg_.head_dim();
  const int64_t ns = ModelConfig::kSpecialTokens;
  const int64_t gh = images.dim(2) / cfg_.patch, gw = images.dim(3) / cfg_.patch;
  const int64_t np = gh * gw, p = ns + np, m = s * p;
  int64_t total = 0;
  for (const AggregatorPart& part : parts) {
    LINGBOT_CHECK(part.cache->pending_frames() == part.frames,
                  "aggregator: the step's pages were not appended");
    LINGBOT_CHECK(part.cache->config().tokens_per_frame == p,
                  "KV cache was sized for " +
                      std::to_string(part.cache->config().tokens_per_frame) +
                      " tokens per frame, these images have " + std::to_string(p) +
                      " (frame size changed within a sequence?)");
    total += part.frames;
  }
  LINGBOT_CHECK(!parts.empty() && total == s, "aggregator: the parts do not cover the images");
  Work& wk = work_[{s, p}];
  if (!wk.x.defined()) {
    wk.x = b.alloc({s, p, c}, DType::F32);
    wk.frame_out = b.alloc({m, c}, DType::F32);
    for (auto& e : wk.emitted) e = b.alloc({s, p, 2 * c}, DType::F32);
    Tensor cs, sn;
    rope2d_table(s, ns, gh, gw, d, cfg_.rope_freq, &cs, &sn);
    wk.rope2d = {b.upload(cs, DType::F32), b.upload(sn, DType::F32), RopePairs::HalfSplit};
  }
  wk.buf.ensure(b, m, c, c * cfg_.mlp_ratio, h, cfg_.compute);

  // Tokens: [camera, registers, scale, patches] per frame. Variant 0 of camera/registers marks
  // the first frame of the sequence; scale variant 0 marks the scale frames (reference rule on
  // the virtual frame index stored + i). The 3D RoPE time index counts each sequence's own
  // stored frames.
  const Tensor& dino = [&]() -> const Tensor& {
    ProfileScope ps(b, profile_, "dino trunk");
    return dino_.enqueue(b, images, wk.buf);
  }();
  trunk_ = &dino;
  const int64_t pairs = d / 2;
  Tensor cs = Tensor::zeros({m, pairs}), sn = Tensor::zeros({m, pairs});
  int64_t f0 = 0;
  for (const AggregatorPart& part : parts) {
    const int64_t stored = part.cache->stored_frames();
    const int64_t e = std::min(part.scale_frames, stored + part.frames);
    for (int64_t i = 0; i < part.frames; ++i) {
      const int64_t vi = stored + i;  // stored frames before it (not its index: non-keyframes)
      const int cam_variant = vi == 0 ? 0 : 1;
      const int scale_variant = (e > 1 ? vi < e : vi == 0) ? 0 : 1;
      Tensor head = wk.x[f0 + i].slice(0, ns), body = wk.x[f0 + i].slice(ns, p);
      b.copy(specials_[cam_variant][scale_variant], head);
      b.copy(dino[f0 + i].slice(1 + cfg_.registers, 1 + cfg_.registers + np), body);
    }
    Tensor pcs, psn;
    rope3d_table(part.frames, stored, ns, gh, gw, d, &pcs, &psn);
    std::copy_n(pcs.f32(), pcs.numel(), cs.f32() + f0 * p * pairs);
    std::copy_n(psn.f32(), psn.numel(), sn.f32() + f0 * p * pairs);
    f0 += part.frames;
  }
  Rope rope3d{b.upload_transient(cs), b.upload_transient(sn), RopePairs::Interleaved};

  // The keys of the step are fixed once its pages are appended: each sequence's global layers'
  // pages and stream rows (list q * depth + l for part q, layer l), each frame's own tokens in
  // the frame blocks (lists after those, the same buffers in every layer). One attention plan
  // serves the whole step.
  const int64_t depth = cfg_.depth, nparts = static_cast<int64_t>(parts.size());
  const int64_t frame_lists = nparts * depth;
  attention_lists_.resize(frame_lists + s);
  for (int64_t q = 0; q < nparts; ++q)
    for (int64_t l = 0; l < depth; ++l) {
      attention_lists_[q * depth + l].clear();
      parts[q].cache->segments(l, attention_lists_[q * depth + l]);
    }
  Tensor k4 = wk.buf.k.reshape({s, p, h, d}), v4 = wk.buf.v.reshape({s, p, h, d});
  for (int64_t f = 0; f < s; ++f)
    attention_lists_[frame_lists + f] = {{k4[f].raw(), v4[f].raw(), static_cast<int32_t>(p)}};
  b.plan_attention(attention_lists_);

  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  AttendFn within_frame = [&](const Tensor& q, const Tensor& k, const Tensor& v, Tensor& out) {
    LINGBOT_CHECK(k.raw() == wk.buf.k.raw() && v.raw() == wk.buf.v.raw(),
                  "aggregator: frame attention outside the planned buffers");
    Tensor q4 = q.reshape({s, p, h, d}), o4 = out.reshape({s, p, h, d});
    for (int64_t f = 0; f < s; ++f) {
      Tensor of = o4[f];
      b.attention_planned(q4[f], static_cast<int>(frame_lists + f), scale, of);
    }
  };
  int64_t layer = 0;
  // A global layer's K/V go from the split straight into each frame's page once every cache
  // can take them (an e4m3 cache sets its scales from the first rows it stores, through store).
  KVDestination into;
  into.rows_per_frame = p;
  into.dtype = parts[0].cache->config().dtype;
  auto direct = [&]() {
    into.frames.clear();
    for (const AggregatorPart& part : parts) {
      if (part.cache->config().dtype != into.dtype) return false;
      for (int64_t f = 0; f < part.frames; ++f)
        if (!part.cache->destination(layer, f, into.frames.emplace_back())) return false;
    }
    return true;
  };
  bool kv_stored = false;  // this layer's K/V went into the pages with the split
  // Each sequence's queries attend over its own keys: one planned call per sequence.
  AttendFn through_cache = [&](const Tensor& q, const Tensor& k, const Tensor& v, Tensor& out) {
    Tensor k4 = k.reshape({s, p, h, d}), v4 = v.reshape({s, p, h, d});
    ProfileScope ps(b, profile_, "global attention (paged)");
    int64_t first = 0;
    for (int64_t i = 0; i < nparts; ++i) {
      const int64_t n = parts[i].frames;
      for (int64_t f = 0; !kv_stored && f < n; ++f)
        parts[i].cache->store(layer, f, k4[first + f], v4[first + f]);
      Tensor oi = out.slice(first * p, (first + n) * p);
      b.attention_planned(q.slice(first * p, (first + n) * p), static_cast<int>(i * depth + layer),
                          scale, oi);
      first += n;
    }
  };

  Tensor x = wk.x.reshape({m, c});
  size_t next_emit = 0;
  for (layer = 0; layer < cfg_.depth; ++layer) {
    {
      ProfileScope ps(b, profile_, "frame blocks");
      enqueue_block(b, frame_blocks_[layer], x, wk.buf, &wk.rope2d, within_frame);
    }
    const bool emit = next_emit < cfg_.selected.size() && cfg_.selected[next_emit] == layer;
    if (emit) b.copy(x, wk.frame_out);
    {
      ProfileScope ps(b, profile_, "global blocks (all)");
      kv_stored = direct();
      enqueue_block(b, global_blocks_[layer], x, wk.buf, &rope3d, through_cache,
                    kv_stored ? &into : nullptr);
    }
    if (emit) {
      Tensor out = wk.emitted[next_emit].reshape({m, 2 * c});
      b.concat_last(wk.frame_out, x, out);
      ++next_emit;
    }
  }
  return wk.emitted;
}

}  // namespace lingbot
