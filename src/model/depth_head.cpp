#include "model/depth_head.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "backend/scratch.h"
#include "lingbot/error.h"
#include "util/profile.h"

namespace lingbot {
namespace {

constexpr float kDepthNormEps = 1e-5f;
constexpr float kPosRatio = 0.1f;
constexpr double kOmega0 = 100.0;

// torch.linspace in float32: the two halves are anchored at opposite ends, which is what makes
// the grid symmetric to the last bit.
std::vector<float> linspace_f32(double start_d, double end_d, int64_t n) {
  const float start = static_cast<float>(start_d), end = static_cast<float>(end_d);
  std::vector<float> v(n);
  if (n == 1) {
    v[0] = start;
    return v;
  }
  const float step = (end - start) / static_cast<float>(n - 1);
  const int64_t half = n / 2;
  for (int64_t i = 0; i < n; ++i)
    v[i] = i < half ? start + step * static_cast<float>(i)
                    : end - step * static_cast<float>(n - 1 - i);
  return v;
}

// Pixel centres of a [-span, span] box of n cells, in the reference's evaluation order.
std::vector<float> centred_coords(double span, int64_t n) {
  const double edge = (-span * static_cast<double>(n - 1)) / static_cast<double>(n);
  const double other = (span * static_cast<double>(n - 1)) / static_cast<double>(n);
  return linspace_f32(edge, other, n);
}

}  // namespace

Tensor uv_pos_embed(int64_t h, int64_t w, int64_t channels, double aspect_ratio, float ratio) {
  LINGBOT_CHECK(channels % 4 == 0, "uv_pos_embed: channels must be a multiple of 4");
  const double diag = std::sqrt(aspect_ratio * aspect_ratio + 1.0);
  const std::vector<float> xs = centred_coords(aspect_ratio / diag, w);
  const std::vector<float> ys = centred_coords(1.0 / diag, h);
  const int64_t q = channels / 4;
  std::vector<double> omega(q);
  for (int64_t k = 0; k < q; ++k)
    omega[k] = 1.0 / std::pow(kOmega0, static_cast<double>(k) / static_cast<double>(q));

  // Channel blocks [sin x | cos x | sin y | cos y], products and trig in double as the reference
  // promotes to float64, rounded to float before the ratio is applied.
  Tensor out = Tensor::zeros({1, channels, h, w});
  float* o = out.f32();
  const int64_t plane = h * w;
  for (int64_t k = 0; k < q; ++k) {
    for (int64_t y = 0; y < h; ++y) {
      for (int64_t x = 0; x < w; ++x) {
        const double ax = static_cast<double>(xs[x]) * omega[k];
        const double ay = static_cast<double>(ys[y]) * omega[k];
        const int64_t at = y * w + x;
        o[(0 * q + k) * plane + at] = ratio * static_cast<float>(std::sin(ax));
        o[(1 * q + k) * plane + at] = ratio * static_cast<float>(std::cos(ax));
        o[(2 * q + k) * plane + at] = ratio * static_cast<float>(std::sin(ay));
        o[(3 * q + k) * plane + at] = ratio * static_cast<float>(std::cos(ay));
      }
    }
  }
  return out;
}

void DepthHead::load(WeightLoader& loader, const DepthHeadConfig& cfg) {
  cfg_ = cfg;
  const int64_t f = cfg.features, d = cfg.dim_in;
  const auto& c = cfg.out_channels;
  const std::string pre = "depth_head.";
  auto get = [&](const std::string& key, const Shape& shape, DType dt = DType::F32) {
    return loader.get(pre + key, shape, dt);
  };
  auto conv = [&](const std::string& key, const Shape& shape) {
    return ConvWeights{get(key + ".weight", shape), get(key + ".bias", {shape[0]})};
  };
  auto rcu = [&](const std::string& key) {
    return ResidualConvUnitWeights{conv(key + ".conv1", {f, f, 3, 3}),
                                   conv(key + ".conv2", {f, f, 3, 3})};
  };

  w_.norm_w = get("norm.weight", {d});
  w_.norm_b = get("norm.bias", {d});
  for (int l = 0; l < 4; ++l) {
    const std::string key = "projects." + std::to_string(l);
    // The projections are linear layers over the tokens (2C -> up to 1024 channels, 11 GFLOP
    // a frame): in the compute dtype they run on tensor cores, as the reference's do under
    // autocast.
    w_.projects[l] = {get(key + ".weight", {c[l], d, 1, 1}, cfg.matrices).reshape({c[l], d}),
                      get(key + ".bias", {c[l]})};
  }
  // ConvTranspose weights are [in, out, k, k]; the bias spans the output channels.
  w_.resize0 = {get("resize_layers.0.weight", {c[0], c[0], 4, 4}),
                get("resize_layers.0.bias", {c[0]})};
  w_.resize1 = {get("resize_layers.1.weight", {c[1], c[1], 2, 2}),
                get("resize_layers.1.bias", {c[1]})};
  w_.resize3 = conv("resize_layers.3", {c[3], c[3], 3, 3});
  for (int l = 0; l < 4; ++l)
    w_.layer_rn[l] = get("scratch.layer" + std::to_string(l + 1) + "_rn.weight", {f, c[l], 3, 3});
  for (int k = 0; k < 4; ++k) {
    const std::string key = "scratch.refinenet" + std::to_string(k + 1);
    FusionBlockWeights& r = w_.refinenet[k];
    r.has_residual = k != 3;
    if (r.has_residual) r.rcu1 = rcu(key + ".resConfUnit1");
    r.rcu2 = rcu(key + ".resConfUnit2");
    r.out_conv = conv(key + ".out_conv", {f, f, 1, 1});
  }
  w_.output_conv1 = conv("scratch.output_conv1", {f / 2, f, 3, 3});
  w_.output_conv2a = conv("scratch.output_conv2.0", {cfg.head_hidden, f / 2, 3, 3});
  w_.output_conv2b = conv("scratch.output_conv2.2", {cfg.out_dim, cfg.head_hidden, 1, 1});
  plan_ = Plan{};
}

namespace {

// Pyramid level l: 4x, 2x, 1x the patch grid, then a stride-2 conv (rounding up).
std::array<int64_t, 4> level_sizes(int64_t patches) {
  return {4 * patches, 2 * patches, patches, (patches - 1) / 2 + 1};
}

}  // namespace

ParamCount DepthHead::parameters(const DepthHeadConfig& cfg) {
  const int64_t f = cfg.features, d = cfg.dim_in, hid = cfg.head_hidden, out = cfg.out_dim;
  const auto& o = cfg.out_channels;
  int64_t n = 2 * d;     // norm
  int64_t matrices = 0;  // projects' weights
  for (int64_t ch : o) {
    matrices += ch * d;
    n += ch + f * ch * 9;  // projects' bias, layer_rn (no bias)
  }
  n += o[0] * o[0] * 16 + o[0] + o[1] * o[1] * 4 + o[1] + o[3] * o[3] * 9 + o[3];  // resize
  n += 14 * (9 * f * f + f);   // refinenets 1-3 have two residual units, refinenet4 one
  n += 4 * (f * f + f);        // out_conv of each refinenet
  n += f / 2 * f * 9 + f / 2;  // output_conv1
  n += hid * (f / 2) * 9 + hid + out * hid + out;             // output_conv2
  int64_t packed = 14 * scratch::conv_packed_elems(f, f, 3);  // residual units
  packed += 4 * scratch::conv_packed_elems(f, f, 1);          // out_convs
  for (int64_t ch : o)
    packed += scratch::conv_packed_elems(f, ch, 3) + scratch::conv_packed_elems(ch, d, 1);
  packed += scratch::conv_packed_elems(o[3], o[3], 3) + scratch::conv_packed_elems(f / 2, f, 3) +
            scratch::conv_packed_elems(hid, f / 2, 3) + scratch::conv_packed_elems(out, hid, 1);
  return {.compute = static_cast<size_t>(matrices),
          .f32 = static_cast<size_t>(n),
          .packed = static_cast<size_t>(packed)};
}

size_t DepthHead::plan_bytes_for(const DepthHeadConfig& cfg, int64_t H, int64_t W) {
  const int64_t np = (H / cfg.patch) * (W / cfg.patch);
  const auto& c = cfg.out_channels;
  Plan unused;
  int64_t n = place(cfg, H, W, 1, Tensor(), unused);
  n += (c[0] + c[1] + c[2] + c[3]) * np;  // pos
  n += cfg.features / 2 * H * W;          // pos_out
  return static_cast<size_t>(n) * 4;
}

int64_t DepthHead::place(const DepthHeadConfig& cfg, int64_t H, int64_t W, int64_t frames,
                         const Tensor& arena, Plan& pl) {
  const int64_t p = cfg.patch, f = cfg.features, ph = H / p, pw = W / p, np = ph * pw;
  const auto& c = cfg.out_channels;
  const auto lh = level_sizes(ph), lw = level_sizes(pw);
  int64_t at = 0;
  // Each view starts on a 256-byte boundary, as an allocation of its own would.
  auto take = [&](Tensor& t, const Shape& shape) {
    const int64_t n = shape_numel(shape);
    if (arena.defined()) t = arena.slice(at, at + n).reshape(shape);
    at += (n + 63) / 64 * 64;
  };
  // Projections and resize layers, then the refinenets; low0, which the output stage reads,
  // last.
  take(pl.xn, {frames * np, cfg.dim_in});
  for (int l = 0; l < 4; ++l) {
    take(pl.rows[l], {frames * np, c[l]});
    take(pl.proj[l], {frames, c[l], ph, pw});
  }
  take(pl.resized0, {frames, c[0], lh[0], lw[0]});
  take(pl.resized1, {frames, c[1], lh[1], lw[1]});
  take(pl.resized3, {frames, c[3], lh[3], lw[3]});
  for (int l = 3; l >= 0; --l) {
    take(pl.r[l], {frames, f, lh[l], lw[l]});
    take(pl.tmp[l], {frames, f, lh[l], lw[l]});
    // refinenet{l+1} upsamples to the next finer level; refinenet1 to twice level 0.
    const int64_t oh = l == 0 ? 2 * lh[0] : lh[l - 1], ow = l == 0 ? 2 * lw[0] : lw[l - 1];
    if (l > 0) take(pl.fused[l], {frames, f, oh, ow});
  }
  const int64_t before_low0 = at;
  // The output stage from offset 0, then low0 after whichever ends later. Its two upsampled
  // inputs (refinenet1's output at twice level 0, o1 at the image size) are never held: the
  // convolutions read them upsampled (Backend::upsample_conv2d).
  at = 0;
  take(pl.o1, {frames, f / 2, 2 * lh[0], 2 * lw[0]});
  take(pl.o2, {frames, cfg.head_hidden, H, W});
  take(pl.logits, {frames, cfg.out_dim, H, W});
  at = std::max(at, before_low0);
  take(pl.low0, {frames, f, lh[0], lw[0]});
  return at;
}

size_t DepthHead::scratch_bytes_for(const DepthHeadConfig& cfg, int64_t H, int64_t W) {
  const int64_t p = cfg.patch, f = cfg.features, np = (H / p) * (W / p);
  const auto& c = cfg.out_channels;
  const auto lh = level_sizes(H / p), lw = level_sizes(W / p);
  int64_t most = 0;
  auto take = [&](int64_t floats) { most = std::max(most, floats); };
  for (int l = 0; l < 4; ++l) {
    take(scratch::conv2d_floats(c[l], 3, lh[l] * lw[l]));  // layer_rn
    take(scratch::conv2d_floats(f, 3, lh[l] * lw[l]));     // residual units
  }
  take(scratch::conv2d_floats(c[3], 3, lh[3] * lw[3]));   // resize_layers.3
  take(scratch::conv2d_floats(f, 3, 4 * lh[0] * lw[0]));  // output_conv1
  take(scratch::conv2d_floats(f / 2, 3, H * W));          // output_conv2.0
  take(scratch::conv_transpose2d_floats(c[0], 4, np));    // resize_layers.0
  take(scratch::conv_transpose2d_floats(c[1], 2, np));    // resize_layers.1
  return static_cast<size_t>(most) * 4;
}

size_t DepthHead::upsampled_bytes_for(const DepthHeadConfig& cfg, int64_t H, int64_t W) {
  const auto lh = level_sizes(H / cfg.patch), lw = level_sizes(W / cfg.patch);
  const int64_t f = cfg.features;
  return static_cast<size_t>(std::max(f * 2 * lh[0] * 2 * lw[0], f / 2 * H * W)) * 4;
}

void DepthHead::plan_for(Backend& be, int H, int W, int64_t frames) {
  if (plan_.H != H || plan_.W != W) {
    const int64_t p = cfg_.patch, f = cfg_.features;
    LINGBOT_CHECK(H > 0 && W > 0 && H % p == 0 && W % p == 0,
                  "depth head: image " + std::to_string(H) + "x" + std::to_string(W) +
                      " is not a multiple of the patch size " + std::to_string(p));
    const auto& c = cfg_.out_channels;
    Plan pl;
    pl.H = H;
    pl.W = W;
    pl.ph = H / p;
    pl.pw = W / p;
    const double aspect = static_cast<double>(W) / static_cast<double>(H);
    for (int l = 0; l < 4; ++l)
      pl.pos[l] = be.upload(uv_pos_embed(pl.ph, pl.pw, c[l], aspect, kPosRatio), DType::F32);
    pl.pos_out = be.upload(uv_pos_embed(H, W, f / 2, aspect, kPosRatio), DType::F32);
    plan_ = std::move(pl);
  }
  if (frames > plan_.capacity) {
    release_buffers();  // freed in stream order before the larger arena is taken
    Plan sizes;
    plan_.arena = be.alloc({place(cfg_, H, W, frames, Tensor(), sizes)}, DType::F32);
    plan_.capacity = frames;
    plan_.frames = 0;
  }
  // A smaller batch places its views at the start of the same arena.
  if (plan_.frames != frames) {
    place(cfg_, H, W, frames, plan_.arena, plan_);
    plan_.frames = frames;
  }
}

void DepthHead::release_buffers() {
  // The views share the arena's memory: all of them go.
  Plan kept;
  kept.H = plan_.H;
  kept.W = plan_.W;
  kept.ph = plan_.ph;
  kept.pw = plan_.pw;
  kept.pos = plan_.pos;
  kept.pos_out = plan_.pos_out;
  plan_ = std::move(kept);
}

// The reference's ReLUs are in-place, so the skip connection carries relu(x), not x:
// RCU(x) = relu(x) + conv2(relu(conv1(relu(x)))). Result in x: the second convolution adds
// itself to it.
void DepthHead::residual_conv_unit(Backend& be, const ResidualConvUnitWeights& w, Tensor& x,
                                   Tensor& tmp) {
  be.activate(x, Act::ReLU);
  be.conv2d(x, w.conv1.w, &w.conv1.b, 1, 1, tmp, Act::ReLU);
  be.conv2d(tmp, w.conv2.w, &w.conv2.b, 1, 1, x, Act::None, /*accumulate=*/true);
}

// The reference's block is out_conv(upsample(RCU2(a + RCU1(b)))); out_conv is 1x1 and the
// bilinear weights of each output pixel sum to one (align_corners), so the two commute: this
// computes low = out_conv(RCU2(a + RCU1(b))) on a quarter of the pixels and the caller upsamples
// it. a and b are overwritten.
void DepthHead::fusion_block(Backend& be, const FusionBlockWeights& w, Tensor& a, Tensor* b,
                             Tensor& tmp, Tensor& low) {
  if (b) {
    residual_conv_unit(be, w.rcu1, *b, tmp);
    be.add(a, *b);
  }
  residual_conv_unit(be, w.rcu2, a, tmp);
  be.conv2d(a, w.out_conv.w, &w.out_conv.b, 1, 0, low);
}

void DepthHead::run_batch(Backend& be, const std::array<Tensor, 4>& layers, int64_t first,
                          const std::vector<float*>& depth, const std::vector<float*>& conf) {
  Plan& pl = plan_;
  const int64_t n = pl.frames, np = pl.ph * pl.pw, tokens = layers[0].dim(1);
  std::optional<ProfileScope> stage(std::in_place, be, profile_, "depth: projections, resize");
  for (int l = 0; l < 4; ++l) {
    for (int64_t i = 0; i < n; ++i) {
      Tensor xn = pl.xn.slice(i * np, (i + 1) * np);
      be.layer_norm(layers[l][first + i].slice(tokens - np, tokens), &w_.norm_w, &w_.norm_b,
                    kDepthNormEps, xn);
    }
    be.linear(pl.xn, w_.projects[l].w, &w_.projects[l].b, pl.rows[l]);
    const int64_t ch = pl.rows[l].dim(1);
    Tensor chw = pl.proj[l].reshape({n, ch, np});
    be.transpose_last2(pl.rows[l].reshape({n, np, ch}), chw);
    be.add(pl.proj[l], pl.pos[l]);
  }
  be.conv_transpose2d(pl.proj[0], w_.resize0.w, &w_.resize0.b, 4, pl.resized0);
  be.conv_transpose2d(pl.proj[1], w_.resize1.w, &w_.resize1.b, 2, pl.resized1);
  be.conv2d(pl.proj[3], w_.resize3.w, &w_.resize3.b, 2, 1, pl.resized3);
  const std::array<const Tensor*, 4> resized{&pl.resized0, &pl.resized1, &pl.proj[2], &pl.resized3};
  stage.emplace(be, profile_, "depth: layer_rn convs");
  for (int l = 0; l < 4; ++l) be.conv2d(*resized[l], w_.layer_rn[l], nullptr, 1, 1, pl.r[l]);
  stage.emplace(be, profile_, "depth: refinenets");

  // Coarse to fine: refinenet4 works on level 3 alone, refinenet{l+1} adds level l.
  fusion_block(be, w_.refinenet[3], pl.r[3], nullptr, pl.tmp[3], pl.tmp[3]);
  be.upsample_bilinear(pl.tmp[3], pl.fused[3]);
  for (int l = 2; l >= 1; --l) {
    fusion_block(be, w_.refinenet[l], pl.fused[l + 1], &pl.r[l], pl.tmp[l], pl.tmp[l]);
    be.upsample_bilinear(pl.tmp[l], pl.fused[l]);
  }
  fusion_block(be, w_.refinenet[0], pl.fused[1], &pl.r[0], pl.tmp[0], pl.low0);

  stage.emplace(be, profile_, "depth: output convs");
  be.upsample_conv2d(pl.low0, nullptr, pl.o1.dim(2), pl.o1.dim(3), w_.output_conv1.w,
                     &w_.output_conv1.b, 1, 1, pl.o1);
  be.upsample_conv2d(pl.o1, &pl.pos_out, pl.H, pl.W, w_.output_conv2a.w, &w_.output_conv2a.b, 1, 1,
                     pl.o2, Act::ReLU);
  be.conv2d(pl.o2, w_.output_conv2b.w, &w_.output_conv2b.b, 1, 0, pl.logits);

  stage.emplace(be, profile_, "depth: activation, download");
  const int64_t plane = static_cast<int64_t>(pl.H) * pl.W;
  for (int64_t i = 0; i < n; ++i) {
    Tensor both = pl.logits[i].reshape({2, plane});
    Tensor d = both.slice(0, 1), c = both.slice(1, 2);
    be.activate(d, Act::Exp);
    be.activate(c, Act::ExpP1);
    be.download_async(d, depth[first + i]);
    be.download_async(c, conf[first + i]);
  }
}

DepthOutput DepthHead::run(Backend& be, const std::array<Tensor, 4>& layers, int H, int W,
                           int64_t batch) {
  const int64_t frames = layers[0].dim(0), plane = static_cast<int64_t>(H) * W;
  DepthOutput out{Tensor::zeros({frames, H, W}), Tensor::zeros({frames, H, W})};
  std::vector<float*> depth, conf;
  for (int64_t s = 0; s < frames; ++s) {
    depth.push_back(out.depth.f32() + s * plane);
    conf.push_back(out.conf.f32() + s * plane);
  }
  enqueue(be, layers, H, W, depth, conf, batch);
  be.wait_fence(be.fence());
  return out;
}

void DepthHead::enqueue(Backend& be, const std::array<Tensor, 4>& layers, int H, int W,
                        const std::vector<float*>& depth, const std::vector<float*>& conf,
                        int64_t batch) {
  LINGBOT_CHECK(w_.norm_w.defined(), "depth head: used before load");
  const int64_t frames = layers[0].dim(0);
  LINGBOT_CHECK(batch >= 1 && static_cast<int64_t>(depth.size()) == frames &&
                    static_cast<int64_t>(conf.size()) == frames,
                "depth head: " + std::to_string(frames) + " frames, " +
                    std::to_string(depth.size()) + " depth and " + std::to_string(conf.size()) +
                    " confidence outputs, batch " + std::to_string(batch));
  // The layers are checked once, before any plan is made for them.
  const int64_t np = static_cast<int64_t>(H / cfg_.patch) * (W / cfg_.patch);
  for (const Tensor& t : layers)
    LINGBOT_CHECK(t.rank() == 3 && t.dim(0) == frames && t.dim(1) == layers[0].dim(1) &&
                      t.dim(1) >= np && t.dim(2) == cfg_.dim_in,
                  "depth head: expected 4 layers [S, T >= " + std::to_string(np) + ", " +
                      std::to_string(cfg_.dim_in) + "], got " + shape_str(t.shape()));
  for (int64_t first = 0; first < frames; first += batch) {
    plan_for(be, H, W, std::min(batch, frames - first));
    run_batch(be, layers, first, depth, conf);
  }
}

}  // namespace lingbot
