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
#include "weights/safetensors.h"

namespace lingbot::cli {
namespace {

// Collects per-frame results into the predictions file's tensors.
class PredictionsWriter {
 public:
  // `expected`: frames the run should have (0 = unknown). The buffers are reserved for them, so
  // that they hold what the preflight counts rather than up to three times as much while growing
  // (old and doubled buffer); reserved pages are only taken as they are written. A count that
  // cannot be reserved (a container's wrong estimate) leaves them to grow.
  explicit PredictionsWriter(int64_t expected) : expected_(std::max<int64_t>(expected, 0)) {}
  void add(const FrameResult& r) {
    if (frames_ == 0) {
      h_ = r.height;
      w_ = r.width;
      const size_t n = static_cast<size_t>(expected_);
      try {
        for (auto* v : {&pose_, &k_}) v->reserve(n * 9);
        for (auto* v : {&c2w_, &w2c_}) v->reserve(n * 12);
        for (auto* v : {&depth_, &conf_}) v->reserve(n * r.depth.size());
      } catch (const std::exception&) {  // std::length_error, std::bad_alloc
      }
    }
    ++frames_;
    pose_.insert(pose_.end(), r.pose_enc.begin(), r.pose_enc.end());
    c2w_.insert(c2w_.end(), r.c2w.begin(), r.c2w.end());
    w2c_.insert(w2c_.end(), r.w2c.begin(), r.w2c.end());
    k_.insert(k_.end(), r.intrinsics.begin(), r.intrinsics.end());
    depth_.insert(depth_.end(), r.depth.begin(), r.depth.end());
    conf_.insert(conf_.end(), r.confidence.begin(), r.confidence.end());
  }
  void write(const std::string& path) {
    auto view = [](std::vector<float>& v, Shape s) {
      return Tensor::wrap(v.data(), s, DType::F32, nullptr);
    };
    TensorMap t;
    t["pose_enc"] = view(pose_, {frames_, 9});
    t["c2w"] = view(c2w_, {frames_, 3, 4});
    t["w2c"] = view(w2c_, {frames_, 3, 4});
    t["intrinsics"] = view(k_, {frames_, 3, 3});
    t["depth"] = view(depth_, {frames_, h_, w_});
    t["depth_conf"] = view(conf_, {frames_, h_, w_});
    write_safetensors(path, t, {{"pose_convention", "c2w = [R(q)|t], OpenCV camera axes"}});
  }

 private:
  int64_t expected_ = 0, frames_ = 0, h_ = 0, w_ = 0;
  std::vector<float> pose_, c2w_, w2c_, k_, depth_, conf_;
};

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

std::vector<std::unique_ptr<ResultSink>> make_run_sinks(
    ExportOptions exports, const std::function<double(int64_t)>& timestamp) {
  auto tum = std::find(exports.formats.begin(), exports.formats.end(), "tum");
  if (!timestamp || tum == exports.formats.end()) return make_sinks(exports);
  exports.formats.erase(tum);
  auto sinks = make_sinks(exports);
  const std::string dir = exports.out_dir.empty() ? "." : exports.out_dir;
  std::error_code ec;  // make_sinks made it unless tum was the only format
  std::filesystem::create_directories(dir, ec);
  sinks.push_back(
      make_trajectory_sink(dir + "/trajectory_tum.txt", TrajectoryFormat::TUM, timestamp));
  return sinks;
}

std::string join(const std::vector<std::string>& items) {
  std::string s;
  for (const auto& i : items) s += (s.empty() ? "" : ", ") + i;
  return s;
}

RunSummary run_stream(Engine& engine, const StreamOptions& options, const FrameSource& source,
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
  auto sinks = make_run_sinks(exports, out.timestamp);
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
