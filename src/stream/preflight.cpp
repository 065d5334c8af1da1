#include "stream/preflight.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>

#include "cache/paged_kv.h"
#include "model/model.h"
#include "stream/session.h"

namespace lingbot {
namespace {

// The camera head is fixed by the reference: 4 trunk blocks of width 2C, MLP ratio 4, and its
// cache grows in chunks of this many frames (CameraCache's default).
constexpr int64_t kCameraDepth = 4;
constexpr int64_t kCameraMlpRatio = 4;
constexpr int64_t kCameraChunkFrames = 64;
// The depth head's output_conv2.0 width and output channels (depth, confidence).
constexpr int64_t kDepthHidden = 32;
constexpr int64_t kDepthOut = 2;
// The CUDA conv2d bounds its im2col buffer to this many floats; attention splits at most this
// many ways; cuBLASLt gets this workspace.
constexpr int64_t kIm2colFloats = 64LL << 20;
constexpr int64_t kMaxAttentionSplits = 64;
constexpr size_t kGemmWorkspace = 32u << 20;

struct Counts {
  size_t compute = 0;  // parameters stored in the compute dtype
  size_t f32 = 0;
};

// A pre-norm transformer block: the four matrices run in `in_compute` dtype or F32.
void add_block(Counts& n, int64_t dim, int64_t mlp_ratio, int64_t qk_norm_dim, bool in_compute) {
  const size_t matrices = static_cast<size_t>((4 + 2 * mlp_ratio) * dim * dim);
  (in_compute ? n.compute : n.f32) += matrices;
  // norm1 (2), qkv bias (3), proj bias, ls1, norm2 (2), fc1 bias (ratio), fc2 bias, ls2.
  n.f32 += static_cast<size_t>((11 + mlp_ratio) * dim + 4 * qk_norm_dim);
}

Counts count(const ModelConfig& c) {
  Counts n;
  const int64_t C = c.dim, p = c.patch;
  // Aggregator: camera, register and scale tokens (two variants each), frame and global blocks.
  n.f32 += static_cast<size_t>(2 * C * (2 + c.registers));
  for (int64_t i = 0; i < 2 * c.depth; ++i) add_block(n, C, c.mlp_ratio, c.head_dim(), true);
  // DINO: cls, registers, learned position grid, patch embedding, blocks, final norm.
  n.f32 += static_cast<size_t>(C * (1 + c.registers + 1 + c.pos_grid * c.pos_grid) + C + 2 * C);
  n.compute += static_cast<size_t>(C * 3 * p * p);
  for (int64_t i = 0; i < c.dino_depth; ++i) add_block(n, C, c.mlp_ratio, 0, true);
  // Camera head, width D = 2C: the trunk's and the modulation's matrices in the compute dtype,
  // the rest F32.
  const int64_t D = 2 * C;
  for (int64_t i = 0; i < kCameraDepth; ++i) add_block(n, D, kCameraMlpRatio, 0, true);
  n.compute += static_cast<size_t>(3 * D * D);      // poseLN_modulation
  n.f32 += static_cast<size_t>(4 * D                // token_norm, trunk_norm
                               + 9 + 9 * D + D      // empty pose, embed_pose
                               + 3 * D              // poseLN_modulation bias
                               + D / 2 * D + D / 2  // pose_branch.fc1
                               + 9 * (D / 2) + 9);  // pose_branch.fc2
  // Depth head (DPT, F32).
  const int64_t F = c.dpt_features;
  const auto& o = c.dpt_out;
  int64_t d = 2 * D;                                   // norm
  for (int64_t ch : o) d += ch * D + ch + F * ch * 9;  // projects, layer_rn (no bias)
  d += o[0] * o[0] * 16 + o[0] + o[1] * o[1] * 4 + o[1] + o[3] * o[3] * 9 + o[3];  // resize
  d += 14 * (9 * F * F + F);   // refinenets 1-3 have two residual units, refinenet4 one
  d += 4 * (F * F + F);        // out_conv of each refinenet
  d += F / 2 * F * 9 + F / 2;  // output_conv1
  d += kDepthHidden * (F / 2) * 9 + kDepthHidden + kDepthOut * kDepthHidden + kDepthOut;
  n.f32 += static_cast<size_t>(d);
  return n;
}

KVCacheConfig kv_config_for(const ModelConfig& c, DType compute, int64_t height, int64_t width,
                            const StreamOptions& s) {
  ModelConfig with_dtype = c;
  with_dtype.compute = compute;
  return kv_cache_config(with_dtype, height, width, s);
}

// Buffers a forward call of `s` frames keeps per shape (the aggregator and DINO cache their work
// buffers by frame count, so phase 1's set stays allocated next to phase 2's), plus what the
// call allocates and frees. Derived from Aggregator/Dino/BlockBuffers allocation code.
size_t call_buffers(const ModelConfig& c, size_t e, int64_t s, int64_t height, int64_t width) {
  const int64_t C = c.dim, p = c.patch, np = (height / p) * (width / p);
  const int64_t P = ModelConfig::kSpecialTokens + np, nd = 1 + c.registers + np;
  const size_t f4 = 4;
  const size_t block = static_cast<size_t>((9 + c.mlp_ratio) * C) * e;  // per token
  size_t b = 0;
  // Aggregator: tokens and frame output (F32), 4 emitted [P, 2C] layers, block buffers, 2D RoPE
  // table; the 3D RoPE table is rebuilt every call.
  b += static_cast<size_t>(s * P) * (static_cast<size_t>(10 * C) * f4 + block);
  b += static_cast<size_t>(s * P * c.head_dim()) * f4 * 2;
  // DINO: patch rows (F32, and a compute copy), patch embeddings, tokens in/out, block buffers,
  // position table.
  const size_t rows = static_cast<size_t>(s * np * 3 * p * p);
  b += rows * f4 + (e != f4 ? rows * e : 0) + static_cast<size_t>(s * np * C) * e;
  b += static_cast<size_t>(s * nd) * (static_cast<size_t>(2 * C) * f4 + block);
  b += static_cast<size_t>(nd * C) * f4;
  // The normalized frames.
  b += static_cast<size_t>(s * 3 * height * width) * f4;
  return b;
}

// The depth head's per-resolution plan (Dpt::plan_for, F32) and the largest scratch any of its
// convolutions asks for.
void depth_buffers(const ModelConfig& c, int64_t height, int64_t width, size_t* plan,
                   int64_t* scratch_floats) {
  const int64_t p = c.patch, ph = height / p, pw = width / p, np = ph * pw, F = c.dpt_features;
  const int64_t D = 2 * c.dim, hw = height * width;
  const auto& o = c.dpt_out;
  const int64_t lh[4] = {4 * ph, 2 * ph, ph, (ph - 1) / 2 + 1};
  const int64_t lw[4] = {4 * pw, 2 * pw, pw, (pw - 1) / 2 + 1};
  int64_t n = np * D;  // normalized tokens
  int64_t im2col = 0;
  auto conv = [&](int64_t ci, int64_t k, int64_t pixels) {
    im2col = std::max(im2col, std::min(ci * k * k * pixels, kIm2colFloats));
  };
  for (int l = 0; l < 4; ++l) {
    n += 3 * o[l] * np;          // position table, projected rows, projection
    n += 3 * F * lh[l] * lw[l];  // refinenet input and its two temporaries
    const int64_t oh = l == 0 ? 2 * lh[0] : lh[l - 1], ow = l == 0 ? 2 * lw[0] : lw[l - 1];
    n += 2 * F * oh * ow;          // upsampled, fused
    conv(o[l], 3, lh[l] * lw[l]);  // layer_rn
    conv(F, 3, lh[l] * lw[l]);     // residual units
  }
  n += o[0] * lh[0] * lw[0] + o[1] * lh[1] * lw[1] + o[3] * lh[3] * lw[3];  // resized levels
  n += F / 2 * 4 * lh[0] * lw[0];                                           // output_conv1
  n += 2 * (F / 2) * hw + kDepthHidden * hw + kDepthOut * hw;  // upsampled + its pos, o2, logits
  conv(o[3], 3, lh[3] * lw[3]);                                // resize_layers.3
  conv(F, 3, 4 * lh[0] * lw[0]);                               // output_conv1
  conv(F / 2, 3, hw);                                          // output_conv2.0
  // Transposed convolutions scatter through a [Co k k, pixels] temporary.
  const int64_t scatter = std::max(o[0] * 16 * np, o[1] * 4 * np);
  *plan = static_cast<size_t>(n) * 4;
  *scratch_floats = std::max(im2col, scatter);
}

}  // namespace

size_t count_parameters(const ModelConfig& config) {
  const Counts n = count(config);
  return n.compute + n.f32;
}

int64_t stored_frames(int64_t frames, const StreamOptions& stream) {
  const int64_t scale = std::min<int64_t>(frames, std::max(stream.scale_frames, 1));
  const int64_t interval = std::max(stream.keyframe_interval, 1);
  return scale + (frames - scale + interval - 1) / interval;
}

MemoryEstimate estimate_memory(const ModelConfig& config, DType compute, int64_t height,
                               int64_t width, int64_t frames, const StreamOptions& stream,
                               const ResultOutputs* results) {
  MemoryEstimate m;
  const size_t e = dtype_size(compute);
  const Counts n = count(config);
  m.weights = n.compute * e + n.f32 * 4;

  const int64_t stored = stored_frames(frames, stream);
  const KVCacheConfig kv = kv_config_for(config, compute, height, width, stream);
  m.kv_cache = PagedKVCache::bytes_for(kv, stored);
  m.special_stream = m.kv_cache - PagedKVCache::bytes_for(kv, 0);  // less the page pool

  // One camera token (width 2C, F32) per stored frame, K and V, in every (iteration, block) slot.
  m.camera_cache =
      CameraCache::bytes_for(stream.camera_iterations * kCameraDepth, 2 * config.dim, DType::F32,
                             kCameraChunkFrames, stored, camera_limit(stream));

  // Activations: phase 1's buffers (scale frames at once) stay allocated next to phase 2's (one
  // frame); the camera head keeps one scratch sized for the larger call (~32 rows of its width
  // per frame is generous: norms, qkv, attention, the 4x MLP); the depth head one plan per
  // resolution; the backend one grow-only scratch block (largest of: im2col column chunk,
  // transposed-conv scatter, split-attention partials of a streamed frame) and a GEMM workspace.
  // 10 % on top covers the stream-ordered pool's rounding and small per-call tables.
  const int64_t s1 = std::min<int64_t>(frames, std::max(stream.scale_frames, 1));
  const int64_t P = ModelConfig::kSpecialTokens + (height / config.patch) * (width / config.patch);
  size_t a = call_buffers(config, e, s1, height, width) + call_buffers(config, e, 1, height, width);
  a += static_cast<size_t>(s1 * 2 * config.dim) * 4 * 32;
  size_t plan = 0;
  int64_t scratch = 0;
  depth_buffers(config, height, width, &plan, &scratch);
  const int64_t partials = kMaxAttentionSplits * P * config.heads * (config.head_dim() + 1);
  a += plan + static_cast<size_t>(std::max(scratch, partials)) * 4 + kGemmWorkspace;
  m.activations = a + a / 10;

  if (results) m.results = estimate_result_memory(*results, height, width, frames, s1);
  m.total = m.weights + m.kv_cache + m.camera_cache + m.activations;
  if (results && results->on_host) m.total += m.results;
  return m;
}

size_t estimate_result_memory(const ResultOutputs& r, int64_t height, int64_t width, int64_t frames,
                              int64_t scale_frames, int64_t window_frames) {
  const size_t f4 = 4, plane = static_cast<size_t>(height * width) * f4;
  const size_t n = static_cast<size_t>(std::max<int64_t>(frames, 0));
  const size_t s1 =
      static_cast<size_t>(std::clamp<int64_t>(scale_frames, 1, std::max<int64_t>(frames, 1)));
  size_t b = 0;
  // Per frame: pose_enc, c2w, w2c, intrinsics (9 + 12 + 12 + 9 floats) and the TUM timestamp,
  // and for the predictions file depth and confidence.
  b += n * (42 * f4 + 8);
  if (r.predictions) {
    b += n * 2 * plane;
    // Windowed: the window being aligned and the previous one (their depth and confidence) beside
    // the stitched result; frame types and keyframe flags.
    if (r.windowed) b += 2 * static_cast<size_t>(window_frames) * 2 * plane + 2 * n;
  }
  if (r.glb) {
    const int64_t stride = std::max(r.point_stride, 1);
    const size_t points =
        static_cast<size_t>(((height + stride - 1) / stride) * ((width + stride - 1) / stride));
    b += n * (points * 16 + 80);  // x y z F32 + RGBA8 per point; camera and typical depth
  }
  // The session: two result slots (normalized input 3 planes, depth, confidence) of a phase-1
  // call; the phase-1 frames and their batched copy; two frames waiting for their results.
  b += 2 * s1 * 5 * plane + 2 * s1 * 3 * plane + 2 * 3 * plane;
  b += static_cast<size_t>(std::max<int64_t>(r.recent_frames - 1, 0)) * 3 * plane;
  return b;
}

std::string format_gb(size_t bytes) {
  char buf[32];
  if (bytes >= 1000000000)
    std::snprintf(buf, sizeof buf, "%.1f GB", static_cast<double>(bytes) / 1e9);
  else
    std::snprintf(buf, sizeof buf, "%.0f MB", static_cast<double>(bytes) / 1e6);
  return buf;
}

size_t host_memory_available() {
  std::ifstream f("/proc/meminfo");
  const std::string key = "MemAvailable:";
  for (std::string line; std::getline(f, line);)
    if (line.rfind(key, 0) == 0)
      return std::strtoull(line.c_str() + key.size(), nullptr, 10) * 1024;  // reported in kB
  return 0;
}

namespace {

// The numbers and the suggestions, `tries` being "a 1 or b 2" or empty.
std::string shortfall_line(const MemoryEstimate& need, size_t available, std::string tries) {
  if (tries.empty())
    tries = "no single setting fits; combine them or use a larger device";
  else
    tries = "try " + tries;
  return "needs ~" + format_gb(need.total) + " (" + describe_terms(need) + "), " +
         format_gb(available) + " available: " + tries;
}

// Linear scans (from, from + step, ..., to) for the mildest setting that fits on its own: the
// special-token stream grows in whole chunks, so the totals are not strictly monotonic. "" when
// none does.
template <class Fits>
std::string first_fit(const std::string& flag, int64_t from, int64_t to, int64_t step, Fits fits) {
  for (int64_t v = from; step > 0 ? v <= to : v >= to; v += step)
    if (fits(v)) return flag + " " + std::to_string(v);
  return "";
}

// The largest value in [lo, hi] that fits, by bisection: for a knob whose estimate never shrinks
// as the value grows (the special-frame cap: keeping more rows never takes fewer chunks). ""
// when even `lo` does not fit.
template <class Fits>
std::string largest_fit(const std::string& flag, int64_t lo, int64_t hi, Fits fits) {
  if (lo > hi || !fits(lo)) return "";
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo + 1) / 2;
    if (fits(mid))
      lo = mid;
    else
      hi = mid - 1;
  }
  return flag + " " + std::to_string(lo);
}

// Frames whose specials a run of `stored` kept frames moves into the special stream, and so the
// largest cap that still changes anything (a smaller one than a cap already set).
int64_t cap_range(int64_t stored, const StreamOptions& s) {
  const int64_t resident = (s.include_scale_frames ? s.scale_frames : 0) + s.window;
  const int64_t evicted = s.cross_frame_special ? std::max<int64_t>(stored - resident, 0) : 0;
  return s.max_special_frames > 0 ? std::min(evicted, s.max_special_frames) : evicted;
}

// The widest smaller input of the same aspect (sides multiples of the patch) that fits.
template <class Fits>
std::string smaller_size_that_fits(const std::string& name, int64_t height, int64_t width,
                                   int64_t patch, Fits fits) {
  for (int64_t w = width - patch; w >= patch; w -= patch) {
    const int64_t h = std::max(patch, height * w / width / patch * patch);
    if (fits(h, w))
      return name + " " + std::to_string(w) + " (" + std::to_string(w) + "x" + std::to_string(h) +
             " input)";
  }
  return "";
}

}  // namespace

std::string describe_terms(const MemoryEstimate& m) {
  std::string s = "weights " + format_gb(m.weights) + ", KV cache " + format_gb(m.kv_cache) +
                  ", camera cache " + format_gb(m.camera_cache) + ", activations " +
                  format_gb(m.activations);
  if (m.results) s += ", results " + format_gb(m.results);
  return s;
}

std::string explain_shortfall(const SettingNames& names, const MemoryEstimate& need,
                              size_t available, const ModelConfig& config, DType compute,
                              int64_t height, int64_t width, int64_t frames,
                              const StreamOptions& stream, const ResultOutputs* results) {
  auto fits = [&](const StreamOptions& s, int64_t h, int64_t w) {
    return estimate_memory(config, compute, h, w, frames, s, results).total <= available;
  };
  // For each knob, the mildest setting that fits on its own.
  std::string tries;
  auto suggest = [&](const std::string& s) {
    if (!s.empty()) tries += (tries.empty() ? "" : " or ") + s;
  };
  auto with = [&](auto field) {
    return [&, field](int64_t v) {
      StreamOptions s = stream;
      s.*field = static_cast<int>(v);
      return fits(s, height, width);
    };
  };
  const int64_t stored = stored_frames(frames, stream);
  suggest(first_fit(names(Setting::Window), std::min<int64_t>(stream.window, stored) - 1, 1, -1,
                    with(&StreamOptions::window)));
  const int64_t interval = std::max(stream.keyframe_interval, 1);
  suggest(first_fit(names(Setting::KeyframeInterval), interval + 1,
                    std::max<int64_t>(frames - stream.scale_frames, 1), 1,
                    with(&StreamOptions::keyframe_interval)));
  suggest(first_fit(names(Setting::ScaleFrames), stream.scale_frames - 1, 1, -1,
                    with(&StreamOptions::scale_frames)));
  suggest(smaller_size_that_fits(names(Setting::InputWidth), height, width, config.patch,
                                 [&](int64_t h, int64_t w) { return fits(stream, h, w); }));
  // The special stream and the camera caches grow with the run; a cap bounds both.
  suggest(largest_fit(names(Setting::MaxSpecialFrames), 1, cap_range(stored, stream) - 1,
                      with(&StreamOptions::max_special_frames)));
  return shortfall_line(need, available, tries);
}

std::string growth_note(const SettingNames& names, const MemoryEstimate& m,
                        const StreamOptions& stream) {
  if (stream.max_special_frames > 0) return "";  // already bounded
  const size_t growing = m.special_stream + m.camera_cache;
  if (m.total == 0 || 2 * growing <= m.total) return "";
  return "note: " + format_gb(growing) + " of the ~" + format_gb(m.total) +
         " is the special-token stream and camera caches, which grow with the number of "
         "frames; " +
         names(Setting::MaxSpecialFrames) +
         " N bounds them (see \"Long sequences\" in docs/ARCHITECTURE.md)";
}

int64_t longest_window(int64_t frames, const WindowedOptions& o) {
  if (frames <= 0) return 0;
  // plan_windows' first window: the scale block, then window_size - scale keyframe slots.
  const int64_t ws = std::min<int64_t>(std::max(o.scale_frames, 1), frames);
  const int64_t slots = std::max<int64_t>(o.window_size - ws, 0);
  return std::min(ws + slots * std::max(o.keyframe_interval, 1), frames);
}

int64_t window_cached_frames(int64_t frames, const WindowedOptions& o) {
  if (o.flow_threshold <= 0)
    return stored_frames(longest_window(frames, o), window_stream_options(o));
  const int64_t ws = std::min<int64_t>(std::max(o.scale_frames, 1), frames);
  return std::min<int64_t>(frames, std::max<int64_t>(o.window_size, ws));
}

MemoryEstimate estimate_windowed_memory(const ModelConfig& config, DType compute, int64_t height,
                                        int64_t width, int64_t frames, const WindowedOptions& o,
                                        const ResultOutputs* results) {
  // The peak window is a streaming run of its cached frames, every one of them kept.
  StreamOptions s = window_stream_options(o);
  s.keyframe_interval = 1;
  MemoryEstimate m =
      estimate_memory(config, compute, height, width, window_cached_frames(frames, o), s);
  if (results) {
    // The results cover the whole sequence; with a flow threshold a window runs until it has
    // its keyframes, at most the whole sequence.
    ResultOutputs r = *results;
    r.windowed = true;
    const int64_t window = o.flow_threshold > 0 ? frames : longest_window(frames, o);
    m.results = estimate_result_memory(r, height, width, frames, o.scale_frames, window);
    if (r.on_host) m.total += m.results;
  }
  return m;
}

std::string describe_windows(int64_t frames, const WindowedOptions& o) {
  const std::string cached =
      std::to_string(window_cached_frames(frames, o)) + " frames cached per window";
  if (o.flow_threshold > 0) return ", windowed with adaptive keyframes: up to " + cached;
  return ", windowed: " + std::to_string(plan_windows(frames, o).size()) + " windows of up to " +
         std::to_string(longest_window(frames, o)) + " frames, " + cached;
}

std::string explain_windowed_shortfall(const SettingNames& names, const MemoryEstimate& need,
                                       size_t available, const ModelConfig& config, DType compute,
                                       int64_t height, int64_t width, int64_t frames,
                                       const WindowedOptions& o, const ResultOutputs* results) {
  auto fits = [&](const WindowedOptions& w, int64_t h, int64_t wd) {
    return estimate_windowed_memory(config, compute, h, wd, frames, w, results).total <= available;
  };
  std::string tries;
  auto suggest = [&](const std::string& s) {
    if (!s.empty()) tries += (tries.empty() ? "" : " or ") + s;
  };
  auto with = [&](auto field) {
    return [&, field](int64_t v) {
      WindowedOptions w = o;
      w.*field = static_cast<int>(v);
      return fits(w, height, width);
    };
  };
  suggest(first_fit(names(Setting::WindowSize),
                    std::min<int64_t>(o.window_size, window_cached_frames(frames, o)) - 1, 1, -1,
                    with(&WindowedOptions::window_size)));
  // The page pool is sized by the sliding window, or by the window size when that is smaller
  // (window_stream_options): only a sliding window below the latter helps.
  suggest(first_fit(names(Setting::Window), window_stream_options(o).window - 1, 1, -1,
                    with(&WindowedOptions::sliding_window)));
  suggest(smaller_size_that_fits(names(Setting::InputWidth), height, width, config.patch,
                                 [&](int64_t h, int64_t w) { return fits(o, h, w); }));
  StreamOptions s = window_stream_options(o);
  s.keyframe_interval = 1;
  suggest(largest_fit(names(Setting::MaxSpecialFrames), 1,
                      cap_range(window_cached_frames(frames, o), s) - 1,
                      with(&WindowedOptions::max_special_frames)));
  return shortfall_line(need, available, tries);
}

}  // namespace lingbot
