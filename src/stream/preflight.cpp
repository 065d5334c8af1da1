// The memory preflight adds up what each component reports it will allocate (the model's
// parameters and work buffers, the sequence's caches, the backend's scratch) and what the outputs
// keep on the host; the milder settings are found by re-estimating with each setting changed.
#include "stream/preflight.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "io/sinks/sink_util.h"
#include "model/model.h"
#include "stream/sequence.h"

namespace lingbot {

int64_t stored_frames(int64_t frames, const StreamOptions& stream) {
  const int64_t scale = std::min<int64_t>(frames, std::max(stream.scale_frames, 1));
  const int64_t interval = std::max(stream.keyframe_interval, 1);
  return scale + (frames - scale + interval - 1) / interval;
}

MemoryEstimate estimate_memory(const ModelConfig& config, DType compute, int64_t height,
                               int64_t width, int64_t frames, const StreamOptions& stream,
                               const ResultOutputs* results) {
  ModelConfig model = config;
  model.compute = compute;
  MemoryEstimate m;
  m.weights = Model::parameters(model).bytes(compute);
  const SequenceBytes caches = SequenceState::bytes_for(
      model, sequence_config(model, height, width, stream), stored_frames(frames, stream));
  m.kv_cache = caches.kv;
  m.special_stream = caches.special_stream;
  m.camera_cache = caches.camera;
  // Phase 1 runs the scale frames at once. 10 % on top covers the stream-ordered pool's rounding
  // and small per-call tables.
  const int64_t s1 = std::min<int64_t>(frames, std::max(stream.scale_frames, 1));
  const Model::WorkBytes w = Model::work_bytes_for(model, height, width, s1);
  m.activation_parts = {w.first_step, w.one_frame_steps, w.depth_plan, w.scratch, w.total() / 10};
  m.activations = w.total() + w.total() / 10;

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
  // Per frame: pose_enc, c2w, w2c, intrinsics (9 + 12 + 12 + 9 floats) and the TUM timestamp;
  // the predictions file's depth and confidence go to disk as they come.
  b += n * (42 * f4 + 8);
  b += n * static_cast<size_t>(std::max(r.kept_maps, 0)) * plane;
  // Windowed: the window being aligned and the previous one (their depth and confidence); frame
  // types and keyframe flags.
  if (r.predictions && r.windowed) b += 2 * static_cast<size_t>(window_frames) * 2 * plane + 2 * n;
  if (r.glb) {
    const int64_t stride = std::max(r.point_stride, 1);
    const size_t points =
        static_cast<size_t>(((height + stride - 1) / stride) * ((width + stride - 1) / stride));
    b += n * (points * 16 + 80);  // x y z F32 + RGBA8 per point; camera and typical depth
  }
  b += static_cast<size_t>(std::max(r.voxel_filters, 0)) * sinks::VoxelFilter::bytes();
  // The session: two result slots (normalized input 3 planes, depth, confidence) of a phase-1
  // call; the phase-1 frames and their batched copy; two frames waiting for their results.
  b += 2 * s1 * 5 * plane + 2 * s1 * 3 * plane + 2 * 3 * plane;
  b += static_cast<size_t>(std::max<int64_t>(r.recent_frames - 1, 0)) * 3 * plane;
  return b;
}

size_t host_memory_available() {
  std::ifstream f("/proc/meminfo");
  const std::string key = "MemAvailable:";
  for (std::string line; std::getline(f, line);)
    if (line.rfind(key, 0) == 0)
      return std::strtoull(line.c_str() + key.size(), nullptr, 10) * 1024;  // reported in kB
  return 0;
}

size_t predictions_file_bytes(int64_t height, int64_t width, int64_t frames) {
  // Per frame: depth and confidence (F32 maps), 42 floats of cameras, frame type and keyframe
  // flag; the header's room is 4 KiB.
  const size_t n = static_cast<size_t>(std::max<int64_t>(frames, 0));
  return n * (2 * static_cast<size_t>(height * width) * 4 + 42 * 4 + 2) + 4096;
}

size_t disk_space_available(const std::string& path) {
  std::error_code ec;
  std::filesystem::path p = std::filesystem::absolute(path, ec);
  if (ec) return 0;
  while (!std::filesystem::exists(p, ec) && p.has_parent_path() && p.parent_path() != p)
    p = p.parent_path();
  const std::filesystem::space_info s = std::filesystem::space(p, ec);
  return ec ? 0 : static_cast<size_t>(s.available);
}

namespace {

// Linear scans (from, from - 1, ..., to) for the mildest setting that fits on its own: the
// special-token stream grows in whole chunks, so the totals are not strictly monotonic in these
// settings. They run over at most a window's frames.
template <class Fits>
std::optional<int> first_fit(int64_t from, int64_t to, int64_t step, Fits fits) {
  for (int64_t v = from; step > 0 ? v <= to : v >= to; v += step)
    if (fits(v)) return static_cast<int>(v);
  return std::nullopt;
}

// The smallest value in [lo, hi] that fits, by bisection: for a setting whose estimate never
// grows as the value grows (the keyframe interval: a longer one keeps fewer frames, and the
// estimate depends on it through the kept frames only). A linear scan took minutes for a run of
// ten million frames.
template <class Fits>
std::optional<int> smallest_fit(int64_t lo, int64_t hi, Fits fits) {
  if (lo > hi || !fits(hi)) return std::nullopt;
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo) / 2;
    if (fits(mid))
      hi = mid;
    else
      lo = mid + 1;
  }
  return static_cast<int>(lo);
}

// The largest value in [lo, hi] that fits, by bisection: for a setting whose estimate never
// shrinks as the value grows (the special-frame cap: keeping more rows never takes fewer chunks).
template <class Fits>
std::optional<int> largest_fit(int64_t lo, int64_t hi, Fits fits) {
  if (lo > hi || !fits(lo)) return std::nullopt;
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo + 1) / 2;
    if (fits(mid))
      lo = mid;
    else
      hi = mid - 1;
  }
  return static_cast<int>(lo);
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
void smaller_size_that_fits(int64_t height, int64_t width, int64_t patch, Fits fits,
                            MilderSettings& out) {
  for (int64_t w = width - patch; w >= patch; w -= patch) {
    const int64_t h = std::max(patch, height * w / width / patch * patch);
    if (fits(h, w)) {
      out.input_width = static_cast<int>(w);
      out.input_height = static_cast<int>(h);
      return;
    }
  }
}

}  // namespace

MilderSettings milder_settings(const ModelConfig& config, DType compute, int64_t height,
                               int64_t width, int64_t frames, const StreamOptions& stream,
                               const ResultOutputs* results, size_t available) {
  auto fits = [&](const StreamOptions& s, int64_t h, int64_t w) {
    return estimate_memory(config, compute, h, w, frames, s, results).total <= available;
  };
  auto with = [&](auto field) {
    return [&, field](int64_t v) {
      StreamOptions s = stream;
      s.*field = static_cast<int>(v);
      return fits(s, height, width);
    };
  };
  MilderSettings m;
  const int64_t stored = stored_frames(frames, stream);
  m.window =
      first_fit(std::min<int64_t>(stream.window, stored) - 1, 1, -1, with(&StreamOptions::window));
  const int64_t interval = std::max(stream.keyframe_interval, 1);
  m.keyframe_interval =
      smallest_fit(interval + 1, std::max<int64_t>(frames - stream.scale_frames, 1),
                   with(&StreamOptions::keyframe_interval));
  m.scale_frames = first_fit(stream.scale_frames - 1, 1, -1, with(&StreamOptions::scale_frames));
  smaller_size_that_fits(
      height, width, config.patch, [&](int64_t h, int64_t w) { return fits(stream, h, w); }, m);
  // The special stream and the camera caches grow with the run; a cap bounds both.
  m.max_special_frames =
      largest_fit(1, cap_range(stored, stream) - 1, with(&StreamOptions::max_special_frames));
  return m;
}

size_t unbounded_growth(const MemoryEstimate& m, const StreamOptions& stream) {
  if (stream.max_special_frames > 0) return 0;  // already bounded
  const size_t growing = m.special_stream + m.camera_cache;
  return m.total > 0 && 2 * growing > m.total ? growing : 0;
}

int64_t longest_window(int64_t frames, const WindowedOptions& o) {
  if (frames <= 0) return 0;
  // plan_windows' first window: the scale block, then window_size - scale keyframe slots.
  const int64_t ws = std::min<int64_t>(std::max(o.stream.scale_frames, 1), frames);
  const int64_t slots = std::max<int64_t>(o.window_size - ws, 0);
  return std::min(ws + slots * std::max(o.stream.keyframe_interval, 1), frames);
}

int64_t window_cached_frames(int64_t frames, const WindowedOptions& o) {
  if (o.stream.flow_threshold <= 0)
    return stored_frames(longest_window(frames, o), per_window_stream(o));
  const int64_t ws = std::min<int64_t>(std::max(o.stream.scale_frames, 1), frames);
  return std::min<int64_t>(frames, std::max<int64_t>(o.window_size, ws));
}

MemoryEstimate estimate_windowed_memory(const ModelConfig& config, DType compute, int64_t height,
                                        int64_t width, int64_t frames, const WindowedOptions& o,
                                        const ResultOutputs* results) {
  // The peak window is a streaming run of its cached frames, every one of them kept.
  StreamOptions s = per_window_stream(o);
  s.keyframe_interval = 1;
  MemoryEstimate m =
      estimate_memory(config, compute, height, width, window_cached_frames(frames, o), s);
  if (results) {
    // The results cover the whole sequence; with a flow threshold a window runs until it has
    // its keyframes, at most the whole sequence.
    ResultOutputs r = *results;
    r.windowed = true;
    const int64_t window = o.stream.flow_threshold > 0 ? frames : longest_window(frames, o);
    m.results = estimate_result_memory(r, height, width, frames, o.stream.scale_frames, window);
    if (r.on_host) m.total += m.results;
  }
  return m;
}

MilderSettings milder_windowed_settings(const ModelConfig& config, DType compute, int64_t height,
                                        int64_t width, int64_t frames, const WindowedOptions& o,
                                        const ResultOutputs* results, size_t available) {
  auto fits = [&](const WindowedOptions& w, int64_t h, int64_t wd) {
    return estimate_windowed_memory(config, compute, h, wd, frames, w, results).total <= available;
  };
  // A setting of the options, or of the stream each window runs, set to the value tried.
  auto with = [&](auto set) {
    return [&, set](int64_t v) {
      WindowedOptions w = o;
      set(w, v);
      return fits(w, height, width);
    };
  };
  MilderSettings m;
  m.window_size =
      first_fit(std::min<int64_t>(o.window_size, window_cached_frames(frames, o)) - 1, 1, -1,
                with([](WindowedOptions& w, int64_t v) { w.window_size = static_cast<int>(v); }));
  // The page pool is sized by the sliding window, or by the window size when that is smaller
  // (per_window_stream): only a sliding window below the latter helps.
  m.window =
      first_fit(per_window_stream(o).window - 1, 1, -1,
                with([](WindowedOptions& w, int64_t v) { w.stream.window = static_cast<int>(v); }));
  smaller_size_that_fits(
      height, width, config.patch, [&](int64_t h, int64_t w) { return fits(o, h, w); }, m);
  StreamOptions s = per_window_stream(o);
  s.keyframe_interval = 1;
  m.max_special_frames =
      largest_fit(1, cap_range(window_cached_frames(frames, o), s) - 1,
                  with([](WindowedOptions& w, int64_t v) { w.stream.max_special_frames = v; }));
  return m;
}

}  // namespace lingbot
