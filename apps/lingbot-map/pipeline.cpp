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

#include "commands.h"
#include "lingbot/error.h"
#include "lingbot/lingbot_c.h"

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
                  "ply, glb, images, colmap, nerfstudio, mcap (a ROS 2 bag), all (all but mcap) "
                  "or none")
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
  // --quiet leaves the warning to the report (its notes and counts, said at the end).
  if (!options.warn && !quiet)
    options.warn = [&](const char* line) {
      if (progress) progress->done();  // a line of its own on a terminal
      std::fprintf(stderr, "lingbot-map: warning: %s\n", line);
    };
  // Nothing arrives before the scale block has run: say so, or the first seconds look stuck.
  if (!quiet && !options.windowed && options.stream.scale_frames > 1 && source.count() != 1)
    std::fprintf(stderr,
                 "phase 1: the first %d frames run together as the scale block; per-frame "
                 "results follow\n",
                 options.stream.scale_frames);
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
  if (!quiet) {
    std::fprintf(stderr, "%s\n", describe(report).c_str());
  } else {  // what the outputs left out is said even so
    for (const std::string& note : report.notes)
      std::fprintf(stderr, "lingbot-map: warning: %s\n", note.c_str());
  }
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

void claim_output_folder(const std::string& dir, bool overwrite) {
  const std::vector<std::string> found = existing_run_outputs(dir);
  if (found.empty()) return;
  if (!overwrite) {
    std::string some;
    for (size_t i = 0; i < found.size() && i < 3; ++i) some += (i ? ", " : "") + found[i];
    throw Error(dir + " holds the results of another run (" + some +
                    (found.size() > 3 ? ", ..." : "") +
                    "): choose another --out, or --overwrite to replace them",
                ErrorKind::InvalidArgument);
  }
  remove_run_outputs(dir);
}

nlohmann::json run_record(const Engine& engine, const EngineOptions& options, const RunOptions& run,
                          const std::string& input, int64_t frames) {
  const ModelInfo info = engine.info();
  const StreamOptions& s = run.stream;
  nlohmann::json j = {{"version", lingbot_version()},
                      {"command", command_line()},
                      {"input", input},
                      {"frames_expected", frames},
                      {"model",
                       {{"path", options.model},
                        {"arch", info.arch},
                        {"parameters", info.parameters},
                        {"backend", info.backend},
                        {"device", options.device},
                        {"compute", info.compute},
                        {"kv_cache", info.kv_cache}}},
                      {"mode", run.windowed ? "windowed" : "streaming"},
                      {"stream",
                       {{"scale_frames", s.scale_frames},
                        {"window", s.window},
                        {"keyframe_interval", s.keyframe_interval},
                        {"camera_iterations", s.camera_iterations},
                        {"flow_threshold", s.flow_threshold},
                        {"max_non_keyframe_gap", s.max_non_keyframe_gap},
                        {"max_special_frames", s.max_special_frames}}},
                      {"exports", run.exports.formats},
                      {"complete", false}};
  if (run.windowed)
    j["windowed"] = {{"window_size", run.windowed->window_size},
                     {"overlap", run.windowed->overlap}};
  // A resumed run's frames stand on the saved session's: which one, and how it went on.
  if (!run.resume.empty())
    j["resumed"] = {{"session", run.resume}, {"mode", run.relocalize ? "relocalize" : "continue"}};
  if (!run.save_session.empty()) j["save_session"] = run.save_session;
  return j;
}

void write_run_record(const std::string& dir, nlohmann::json record, const RunReport* report) {
  if (report) {
    record["complete"] = !report->stopped;
    record["frames"] = report->frames;
    record["windows"] = report->windows;
    record["seconds"] = report->seconds;
    record["frames_per_second"] = report->fps();
    record["stopped"] = report->stopped;
    if (report->resumed_frames > 0) record["resumed"]["saved_frames"] = report->resumed_frames;
  }
  // Replaced whole: a reader never sees half a file.
  const std::string path = dir + "/run.json", tmp = path + ".tmp";
  {
    std::ofstream f(tmp);
    f << record.dump(2) << "\n";
    if (!f) throw Error("cannot write " + tmp);
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) throw Error("cannot write " + path + ": " + ec.message());
}

}  // namespace lingbot::cli
