#include "pipeline.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>

#include "lingbot/error.h"

namespace lingbot::cli {
namespace {

// Ctrl-C or SIGTERM during a run ends its input: the frames read so far are finished and every
// output is written as at the input's end, so a long run cut short keeps a valid
// predictions.safetensors. A second signal, back to the default action, stops at once.
std::atomic<bool> g_stop{false};
bool g_stderr_tty = false;  // the progress line is then still open: start a new one
extern "C" void on_stop_signal(int sig) {
  g_stop = true;
  std::signal(sig, SIG_DFL);
  // Said at once (write is safe in a handler): the outputs of a long run can take seconds.
  static const char kSaid[] =
      "\nlingbot-map: stopping: the frames read are finished and every output written (a second "
      "signal stops at once)\n";
  const char* said = g_stderr_tty ? kSaid : kSaid + 1;
  (void)!::write(STDERR_FILENO, said, sizeof kSaid - 1 - (said - kSaid));
}

// The handlers for one run, put back as they were afterwards; a signal the process was started
// ignoring (nohup, a background job) stays ignored.
class StopOnSignal {
 public:
  StopOnSignal() {
    g_stop = false;
    g_stderr_tty = isatty(STDERR_FILENO);
    for (int i = 0; i < 2; ++i) {
      before_[i] = std::signal(kSignals[i], on_stop_signal);
      if (before_[i] == SIG_IGN) std::signal(kSignals[i], SIG_IGN);
    }
  }
  ~StopOnSignal() {
    for (int i = 0; i < 2; ++i) std::signal(kSignals[i], before_[i]);
  }
  StopOnSignal(const StopOnSignal&) = delete;
  StopOnSignal& operator=(const StopOnSignal&) = delete;

 private:
  static constexpr int kSignals[2] = {SIGINT, SIGTERM};
  void (*before_[2])(int);
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
                  "ply, glb, images, colmap, nerfstudio, all or none")
      ->capture_default_str();
  sub->add_option("--conf-threshold", a.conf_threshold,
                  "points (ply, glb, colmap) need a confidence above this")
      ->capture_default_str();
  sub->add_option("--point-stride", a.point_stride, "points from every N-th pixel in x and y")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 16));
  sub->add_option("--voxel", a.voxel,
                  "points: at most one per cube of this fraction of the first frame's median "
                  "depth (0.01: 1 %), so a long run's cloud grows with the scene (0 = all)")
      ->capture_default_str()
      ->check(kNonNegative);
  sub->add_option("--depth-scale", a.depth_scale, "16-bit depth PNG value = depth x this")
      ->capture_default_str()
      ->check(kPositive);
}

ExportOptions export_options(const ExportArgs& a, FrameNamer name) {
  ExportOptions o;
  o.formats = parse_export_list(a.formats);
  o.points = {.conf_threshold = a.conf_threshold, .stride = a.point_stride, .voxel = a.voxel};
  o.depth.depth_scale = a.depth_scale;
  o.name = std::move(name);
  return o;
}

std::string join(const std::vector<std::string>& items) {
  std::string s;
  for (const auto& i : items) s += (s.empty() ? "" : ", ") + i;
  return s;
}

RunReport run_with_progress(Engine& engine, FrameSource& source, RunOptions options, bool quiet,
                            const std::string& json) {
  std::optional<Progress> progress;
  if (!quiet) {
    progress.emplace(source.count(),
                     source.live() ? std::function<int64_t()>([&] { return source.dropped(); })
                                   : std::function<int64_t()>());
    auto user = std::move(options.on_result);
    int64_t done = 0;
    options.on_result = [&, user](const FrameResult& r, const Tensor& frame) {
      if (user) user(r, frame);
      progress->update(++done, r.keyframe);
    };
  }
  StopOnSignal signals;
  options.stop = [user = std::move(options.stop)] { return g_stop.load() || (user && user()); };
  RunReport report;
  try {
    report = run(engine, source, options);
  } catch (...) {
    if (progress) progress->done();
    throw;
  }
  if (progress) progress->done();
  if (!quiet) std::fprintf(stderr, "%s\n", describe(report).c_str());
  if (report.stopped && !source.live())
    std::fprintf(stderr, "lingbot-map: interrupted after %lld frames; their results are in %s\n",
                 static_cast<long long>(report.frames),
                 options.out_dir.empty() ? "the outputs" : (options.out_dir + "/").c_str());
  if (!json.empty()) {
    std::ofstream f(json);
    f << to_json(report) << "\n";
    if (!f) throw Error("cannot write " + json);
  }
  return report;
}

}  // namespace lingbot::cli
