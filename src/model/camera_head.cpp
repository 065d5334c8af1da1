#include "model/camera_head.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "backend/scratch.h"
#include "lingbot/error.h"

namespace lingbot {
namespace {

constexpr float kNormEps = 1e-5f;
constexpr float kAdaLnEps = 1e-6f;

}  // namespace

void CameraHead::load(WeightLoader& loader, const CameraHeadConfig& cfg) {
  LINGBOT_CHECK(cfg.dim_in == cfg.dim,
                "camera head: the reference feeds the aggregator tokens "
                "straight into the trunk, so dim_in must equal dim");
  LINGBOT_CHECK(cfg.heads > 0 && cfg.dim % cfg.heads == 0 && cfg.dim % 2 == 0,
                "camera head: dim must split into heads");
  cfg_ = cfg;
  const int64_t d = cfg.dim, p = cfg.pose_dim, hidden = cfg.mlp_ratio * d;
  const std::string pre = "camera_head.";
  auto get = [&](const std::string& key, const Shape& shape, DType dt = DType::F32) {
    return loader.get(pre + key, shape, dt);
  };
  const DType md = cfg.matrices;

  w_.token_norm_w = get("token_norm.weight", {d});
  w_.token_norm_b = get("token_norm.bias", {d});
  w_.trunk_norm_w = get("trunk_norm.weight", {d});
  w_.trunk_norm_b = get("trunk_norm.bias", {d});
  w_.empty_pose = get("empty_pose_tokens", {1, 1, p});
  w_.embed_w = get("embed_pose.weight", {d, p});
  w_.embed_b = get("embed_pose.bias", {d});
  w_.mod_w = get("poseLN_modulation.1.weight", {3 * d, d}, md);
  {
    // The modulation scales by (1 + scale): with the 1 in the scale's bias, its output is the
    // factor itself, which a LayerNorm takes as its weight (see modulate).
    const Tensor stored = loader.get_host(pre + "poseLN_modulation.1.bias", {3 * d});
    Tensor bias = Tensor::zeros({3 * d});
    std::copy_n(stored.f32(), 3 * d, bias.f32());
    for (int64_t i = d; i < 2 * d; ++i) bias.f32()[i] += 1.0f;
    w_.mod_b = loader.backend().upload(bias, DType::F32);
  }
  w_.branch_fc1_w = get("pose_branch.fc1.weight", {d / 2, d});
  w_.branch_fc1_b = get("pose_branch.fc1.bias", {d / 2});
  w_.branch_fc2_w = get("pose_branch.fc2.weight", {p, d / 2});
  w_.branch_fc2_b = get("pose_branch.fc2.bias", {p});

  w_.trunk.clear();
  for (int64_t j = 0; j < cfg.depth; ++j) {
    const std::string b = "trunk." + std::to_string(j) + ".";
    BlockWeights blk;
    blk.load(loader, pre + b.substr(0, b.size() - 1), d, hidden, cfg.head_dim(), false, kNormEps,
             md);
    w_.trunk.push_back(std::move(blk));
  }

  // Iteration 0 conditions every frame on the same learned empty pose, so its modulation is a
  // constant of the weights.
  Backend& be = loader.backend();
  Tensor m0 = be.alloc({1, d}, DType::F32);
  mod0_ = be.alloc({1, 3 * d}, DType::F32);
  be.linear(w_.empty_pose.reshape({1, p}), w_.embed_w, &w_.embed_b, m0, Act::SiLU);
  be.linear(m0, w_.mod_w, &w_.mod_b, mod0_);
  scratch_.clear();
  s_ = nullptr;
}

CameraCache CameraHead::make_cache(Backend& backend, int iterations, DType dtype) const {
  return CameraCache(backend, iterations, static_cast<int>(cfg_.depth), cfg_.heads, cfg_.head_dim(),
                     dtype);
}

ParamCount CameraHead::parameters(const CameraHeadConfig& cfg) {
  const int64_t d = cfg.dim, p = cfg.pose_dim;
  ParamCount n;
  for (int64_t j = 0; j < cfg.depth; ++j) n += BlockWeights::parameters(d, cfg.mlp_ratio * d, 0);
  n.compute += static_cast<size_t>(3 * d * d);      // poseLN_modulation
  n.f32 += static_cast<size_t>(4 * d                // token_norm, trunk_norm
                               + p + p * d + d      // empty pose, embed_pose
                               + 3 * d              // poseLN_modulation bias
                               + d / 2 * d + d / 2  // pose_branch.fc1
                               + p * (d / 2) + p);  // pose_branch.fc2
  return n;
}

size_t CameraHead::cache_bytes_for(const CameraHeadConfig& cfg, int iterations, DType dtype,
                                   int64_t frames, const CameraCacheLimit& limit) {
  return CameraCache::bytes_for(iterations * cfg.depth, cfg.dim, dtype, CameraCache::kChunkFrames,
                                frames, limit);
}

size_t CameraHead::scratch_bytes_for(const CameraHeadConfig& cfg, int64_t frames,
                                     DType cache_dtype) {
  const int64_t d = cfg.dim, p = cfg.pose_dim;
  // xhat, h, n, t, m; mod (3); branch (1/2); pose; the block (attention in the cache's dtype);
  // k_store, v_store.
  size_t b = static_cast<size_t>(frames * (8 * d + d / 2 + p)) * 4;
  b += BlockBuffers::bytes_for(frames, d, cfg.mlp_ratio * d, DType::F32, cache_dtype);
  return b + static_cast<size_t>(2 * frames * d) * dtype_size(cache_dtype);
}

size_t CameraHead::backend_scratch_bytes_for(const CameraHeadConfig& cfg, int64_t frames) {
  // The largest matmul's converted input (bf16) and widened output (F32), and the split
  // attention's partials for the frames' queries.
  const int64_t widest = std::max<int64_t>(cfg.mlp_ratio * cfg.dim, 3 * cfg.dim);
  return static_cast<size_t>(frames * widest * (2 + 4) + widest * 4 +
                             scratch::attention_floats(frames, cfg.heads, cfg.head_dim()) * 4) +
         1024;  // each request's pieces are rounded up to 256 bytes
}

void CameraHead::ensure_scratch(Backend& be, int64_t frames, DType cache_dtype) {
  auto [it, fresh] = scratch_.try_emplace({frames, cache_dtype});
  s_ = &it->second;
  if (!fresh) return;
  const int64_t d = cfg_.dim, hd = cfg_.head_dim(), nh = cfg_.heads, p = cfg_.pose_dim;
  auto f32 = [&](const Shape& shape) { return be.alloc(shape, DType::F32); };
  Scratch& s = *s_;
  s.frames = frames;
  s.xhat = f32({frames, d});
  s.h = f32({frames, d});
  s.n = f32({frames, d});
  s.t = f32({frames, d});
  // The residual stream stays F32; q, k, v and the attention output take the cache's dtype, so
  // a bf16 cache is read by the same kernel as the aggregator's and the output projection
  // reads the bf16 rows its bf16 weights would have rounded its input to anyway.
  s.block.ensure(be, frames, d, cfg_.mlp_ratio * d, nh, DType::F32, cache_dtype);
  s.k_store = be.alloc({frames, nh, hd}, cache_dtype);
  s.v_store = be.alloc({frames, nh, hd}, cache_dtype);
  s.branch = f32({frames, d / 2});
  s.pose = f32({frames, p});
  s.m = f32({frames, d});
  s.mod = f32({frames, 3 * d});
}

void CameraHead::modulate(Backend& be, const Tensor& mod) {
  const int64_t d = cfg_.dim;
  // t = LayerNorm(xhat) ⊙ (1 + scale) + shift, the norm's affine being the modulation's (the 1
  // is in its bias); h = xhat + gate ⊙ t. The op set has no row-wise product, so per-frame
  // modulation runs row by row; the shared iteration-0 vector broadcasts in one go.
  auto apply = [&](Tensor t, Tensor h, const Tensor& xhat, const Tensor& m) {
    const Tensor m3 = m.reshape({3, d});
    const Tensor shift = m3[0], scale1 = m3[1], gate = m3[2];
    be.layer_norm(xhat, &scale1, &shift, kAdaLnEps, t);
    be.copy(xhat, h);
    be.add(h, t, &gate);
  };
  Scratch& s = *s_;
  if (mod.dim(0) == 1) {
    apply(s.t, s.h, s.xhat, mod[0]);
    return;
  }
  for (int64_t f = 0; f < s.frames; ++f) apply(s.t[f], s.h[f], s.xhat[f], mod[f]);
}

void CameraHead::destinations(std::span<const CameraPart> parts, int iteration, int j,
                              KVDestination& into) {
  // A part that stores its frames gets their rows appended to its cache; the others' rows only
  // live for this call, in k_store / v_store.
  into.frames.clear();
  into.rows_per_frame = 1;
  into.dtype = parts[0].cache->dtype();
  int64_t r = 0;
  for (const CameraPart& p : parts) {
    if (p.store) {
      p.cache->reserve(iteration, j, p.frames, into.frames);
    } else {
      for (int64_t f = r; f < r + p.frames; ++f)
        into.frames.push_back({s_->k_store[f].raw(), s_->v_store[f].raw(), nullptr});
    }
    r += p.frames;
  }
}

AttendFn CameraHead::attend_through(Backend& be, std::span<const CameraPart> parts, int iteration,
                                    int j) {
  return
      [this, &be, parts, iteration, j](const Tensor& q, const Tensor&, const Tensor&, Tensor& out) {
        // Keys are always [cached frames..., current frames]: split_qkv has written the current
        // rows into the cache (their place reserved by destinations) or into k_store / v_store.
        const float scale = 1.0f / std::sqrt(static_cast<float>(cfg_.head_dim()));
        int64_t r0 = 0;
        for (const CameraPart& p : parts) {
          const int64_t r1 = r0 + p.frames;
          segs_.clear();
          p.cache->segments(iteration, j, segs_);
          if (!p.store)
            segs_.push_back(
                {s_->k_store[r0].raw(), s_->v_store[r0].raw(), static_cast<int32_t>(p.frames)});
          Tensor o = out.slice(r0, r1);
          be.attention(q.slice(r0, r1), segs_, scale, o);
          r0 = r1;
        }
      };
}

Tensor CameraHead::run(Backend& be, const Tensor& camera_tokens, CameraCache& cache, bool store,
                       int iterations) {
  const Tensor& pose = enqueue(be, camera_tokens, cache, store, iterations);
  Tensor out = be.download(pose);
  if (out.raw() == pose.raw()) out = out.to(DType::F32);  // detach from the scratch buffer
  apply_pose_activation(out.f32(), out.dim(0), cfg_.pose_dim);
  return out;
}

// Only the emitted pose gets the activation: the two trailing field-of-view entries are ReLU'd.
void CameraHead::apply_pose_activation(float* pose, int64_t frames, int64_t p) {
  for (int64_t f = 0; f < frames; ++f)
    for (int64_t c = p - 2; c < p; ++c) pose[f * p + c] = std::max(pose[f * p + c], 0.0f);
}

const Tensor& CameraHead::enqueue(Backend& be, const Tensor& camera_tokens, CameraCache& cache,
                                  bool store, int iterations) {
  const CameraPart part{&cache, camera_tokens.rank() == 2 ? camera_tokens.dim(0) : 0, store};
  return enqueue(be, camera_tokens, std::span<const CameraPart>(&part, 1), iterations);
}

const Tensor& CameraHead::enqueue(Backend& be, const Tensor& camera_tokens,
                                  std::span<const CameraPart> parts, int iterations) {
  LINGBOT_CHECK(!w_.trunk.empty(), "camera head: used before load");
  LINGBOT_CHECK(camera_tokens.rank() == 2 && camera_tokens.dim(1) == cfg_.dim_in,
                "camera head: expected camera tokens [S, " + std::to_string(cfg_.dim_in) +
                    "], got " + shape_str(camera_tokens.shape()));
  LINGBOT_CHECK(!parts.empty(), "camera head: a call over no sequence");
  int64_t rows = 0;
  for (const CameraPart& p : parts) {
    LINGBOT_CHECK(p.cache && p.frames > 0, "camera head: a part without frames or cache");
    LINGBOT_CHECK(iterations >= 1 && iterations <= p.cache->iterations() &&
                      p.cache->depth() == static_cast<int>(cfg_.depth),
                  "camera head: the cache has no slots for " + std::to_string(iterations) +
                      " iterations of this trunk");
    LINGBOT_CHECK(p.cache->dtype() == parts[0].cache->dtype(),
                  "camera head: the caches of one call differ in dtype");
    rows += p.frames;
  }
  LINGBOT_CHECK(rows == camera_tokens.dim(0), "camera head: the parts hold " +
                                                  std::to_string(rows) + " frames, the tokens " +
                                                  std::to_string(camera_tokens.dim(0)));
  ensure_scratch(be, rows, parts[0].cache->dtype());
  Scratch& s = *s_;

  be.layer_norm(camera_tokens, &w_.token_norm_w, &w_.token_norm_b, kNormEps, s.xhat);
  for (int i = 0; i < iterations; ++i) {
    if (i == 0) {
      modulate(be, mod0_);
    } else {
      // Conditioning feeds back the raw accumulated pose, not the ReLU'd output.
      be.linear(s.pose, w_.embed_w, &w_.embed_b, s.m, Act::SiLU);
      be.linear(s.m, w_.mod_w, &w_.mod_b, s.mod);
      modulate(be, s.mod);
    }
    for (int64_t j = 0; j < cfg_.depth; ++j) {
      destinations(parts, i, static_cast<int>(j), into_);
      enqueue_block(be, w_.trunk[j], s.h, s.block, nullptr,
                    attend_through(be, parts, i, static_cast<int>(j)), &into_);
    }
    be.layer_norm_linear(s.h, &w_.trunk_norm_w, &w_.trunk_norm_b, kNormEps, s.n, w_.branch_fc1_w,
                         &w_.branch_fc1_b, s.branch, Act::GELU);
    // The first iteration's update is the pose; later ones add to it.
    if (i == 0)
      be.linear(s.branch, w_.branch_fc2_w, &w_.branch_fc2_b, s.pose);
    else
      be.linear_add(s.branch, w_.branch_fc2_w, &w_.branch_fc2_b, s.pose);
  }

  return s.pose;
}

}  // namespace lingbot
