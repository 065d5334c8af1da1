#include "pipeline.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "lingbot/error.h"

namespace lingbot::cli {
namespace {

// One updating line (bar, frames/s, ETA) on a terminal; a plain line per frame otherwise, so
// logs stay readable.
class Progress {
 public:
  explicit Progress(int64_t total, std::function<int64_t()> dropped = {})
      : total_(total), tty_(isatty(fileno(stderr))), dropped_(std::move(dropped)) {}
  void update(int64_t done, bool keyframe) {
    const double s = std::chrono::duration<double>(clock::now() - t0_).count();
    const double fps = s > 0 ? done / s : 0;
    const std::string dropped =
        dropped_ ? "  " + std::to_string(dropped_()) + " dropped" : std::string();
    if (!tty_) {
      std::fprintf(stderr, "frame %lld%s  %.2f frames/s%s\n", static_cast<long long>(done - 1),
                   keyframe ? "" : " (non-keyframe)", fps, dropped.c_str());
      return;
    }
    std::string line = "\r" + std::to_string(done);
    if (total_ > 0) {
      constexpr int kWidth = 30;
      const int filled = static_cast<int>(kWidth * std::min<int64_t>(done, total_) / total_);
      line = "\r[" + std::string(filled, '#') + std::string(kWidth - filled, '.') + "] " +
             std::to_string(done) + "/" + std::to_string(total_);
    }
    char tail[64];
    const double eta = fps > 0 && total_ > done ? (total_ - done) / fps : 0;
    std::snprintf(tail, sizeof tail, " frames  %.2f frames/s  ETA %.0f s", fps, eta);
    std::fputs((line + tail + dropped + "   ").c_str(), stderr);
    std::fflush(stderr);
  }
  void done() {
    if (tty_) std::fputc('\n', stderr);
  }

 private:
  using clock = std::chrono::steady_clock;
  int64_t total_;
  bool tty_;
  std::function<int64_t()> dropped_;
  clock::time_point t0_ = clock::now();
};

}  // namespace

void add_export_options(CLI::App* sub, ExportArgs& a) {
  sub->add_option("--export", a.formats,
                  "files for other tools, comma-separated: tum, kitti, json, depth, depth_f32, "
                  "ply, glb, colmap, nerfstudio, all or none")
      ->capture_default_str();
  sub->add_option("--conf-threshold", a.conf_threshold,
                  "points (ply, glb, colmap) need a confidence above this")
      ->capture_default_str();
  sub->add_option("--point-stride", a.point_stride, "points from every N-th pixel in x and y")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 16));
  sub->add_option("--depth-scale", a.depth_scale, "16-bit depth PNG value = depth x this")
      ->capture_default_str()
      ->check(kPositive);
}

ExportOptions export_options(const ExportArgs& a, FrameNamer name) {
  ExportOptions o;
  o.formats = parse_export_list(a.formats);
  o.points = {.conf_threshold = a.conf_threshold, .stride = a.point_stride};
  o.depth.depth_scale = a.depth_scale;
  o.name = std::move(name);
  return o;
}

std::string join(const std::vector<std::string>& items) {
  std::string s;
  for (const auto& i : items) s += (s.empty() ? "" : ", ") + i;
  return s;
}

RunSummary run_stream(Engine& engine, const StreamOptions& options, const NextFrame& source,
                      const RunOutputs& out) {
  std::error_code ec;
  std::filesystem::create_directories(out.out_dir, ec);
  if (ec || !std::filesystem::is_directory(out.out_dir))
    throw Error("cannot create output folder " + out.out_dir + ": " + ec.message());
  std::ofstream stats;
  if (!out.cache_stats_path.empty()) {
    stats.open(out.cache_stats_path);
    if (!stats) throw Error("cannot write " + out.cache_stats_path);
  }
  ExportOptions exports = out.exports;
  if (exports.out_dir.empty()) exports.out_dir = out.out_dir;
  exports.timestamp = out.timestamp;
  auto sinks = make_sinks(exports);
  // Results can come several frames after their push (the scale frames arrive together), so
  // the frames wait here, by index, for the sinks that colour points or save images.
  std::map<int64_t, Tensor> waiting;
  int64_t pushed = 0;
  auto session = engine.start(options);
  PredictionsWriter predictions(out.total_frames);
  RunSummary summary;
  const auto t0 = std::chrono::steady_clock::now();
  Progress progress(out.total_frames, out.dropped);
  auto on_result = [&](const FrameResult& r) {
    predictions.add(r);
    if (!sinks.empty()) {
      auto it = waiting.find(r.index);
      const Tensor* rgb = it == waiting.end() ? nullptr : &it->second;
      for (auto& s : sinks) s->add(r, rgb);
      if (it != waiting.end()) waiting.erase(it);
    }
    ++summary.frames;
    if (stats.is_open()) {
      const CacheStats c = session->cache_stats();
      nlohmann::ordered_json j = {{"frame", r.index},
                                  {"keyframe", r.keyframe},
                                  {"stored_frames", c.stored_frames},
                                  {"scale_pages", c.scale_pages},
                                  {"live_pages", c.live_pages},
                                  {"free_pages", c.free_pages},
                                  {"special_tokens", c.special_tokens},
                                  {"bytes", c.bytes},
                                  {"special_frames", c.special_frames},
                                  {"special_bytes", c.special_bytes},
                                  {"camera_cache_bytes", c.camera_cache_bytes}};
      stats << j.dump() << "\n";
      stats.flush();
    }
    if (!out.quiet) progress.update(summary.frames, r.keyframe);
  };
  // A source that fails part way (a damaged file, a camera or stream that drops, an unreadable
  // image) ends the run like its end would, so that the frames before it are delivered and
  // written, and then fails it with the source's error.
  std::optional<std::string> input_error;
  for (;;) {
    std::optional<Tensor> frame;
    try {
      frame = source();
    } catch (const Error& e) {
      input_error = e.what();
    }
    if (!frame) break;
    if (!sinks.empty()) waiting.emplace(pushed, *frame);
    ++pushed;
    session->push(*frame, on_result);
  }
  session->finish(on_result);
  if (!out.quiet) progress.done();
  for (auto& s : sinks) s->finish();
  summary.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (summary.frames == 0) throw Error(input_error ? *input_error : "no frames to process");
  predictions.write(out.out_dir + "/predictions.safetensors");
  if (input_error)
    throw Error(*input_error + "; the results of the " + std::to_string(summary.frames) +
                " frames before it are in " + out.out_dir + "/");
  return summary;
}

}  // namespace lingbot::cli
