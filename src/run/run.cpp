// lingbot::run: the source, device and output stages of a run (see lingbot/run.h).
#include "lingbot/run.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>
#include <vector>

#include "io/sinks/sink_util.h"
#include "lingbot/error.h"
#include "run/clock.h"
#include "run/loop_closing.h"
#include "run/output_threads.h"
#include "run/prefetch.h"

namespace lingbot {
namespace {

// Latencies in 0.1 ms bins up to 10 s (the last bin holds the rest): fixed memory however long
// a live run lasts.
class LatencyHistogram {
 public:
  void add(double seconds) {
    const auto bin = static_cast<size_t>(std::max(seconds, 0.0) * 1e4);
    ++bins_[std::min(bin, bins_.size() - 1)];
    ++count_;
  }
  int64_t count() const { return count_; }
  double percentile_ms(double p) const {
    if (count_ == 0) return 0;
    const auto rank = static_cast<int64_t>(p * (count_ - 1));
    int64_t seen = 0;
    for (size_t b = 0; b < bins_.size(); ++b) {
      seen += bins_[b];
      if (seen > rank) return (b + 0.5) * 0.1;
    }
    return bins_.size() * 0.1;
  }

 private:
  std::vector<int64_t> bins_ = std::vector<int64_t>(100000);
  int64_t count_ = 0;
};

void write_cache_stats(std::ofstream& out, const FrameResult& r, const CacheStats& c) {
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
  out << j.dump() << "\n";
  out.flush();
}

// What every result goes through on the device thread, whichever the mode: the cache
// statistics, the output threads (the predictions file among them) and the caller's callback.
class Delivery {
 public:
  // `base`: the index of the run's first frame (a continued session's saved frames come
  // first); `history`: the saved frames' cameras, for the camera-only exports.
  Delivery(FrameSource& source, const RunOptions& o, RunReport& report, int64_t base = 0,
           std::vector<FrameResult> history = {})
      : o_(o), report_(report) {
    std::vector<std::shared_ptr<ResultSink>> sinks = o.sinks;
    if (!o.out_dir.empty()) {
      sinks::make_folder(o.out_dir);
      predictions_ = std::make_shared<PredictionsWriter>(o.out_dir + "/predictions.safetensors");
      sinks.push_back(predictions_);
    }
    if (!o.cache_stats_path.empty()) {
      stats_.open(o.cache_stats_path);
      if (!stats_) throw Error("cannot write " + o.cache_stats_path);
    }
    ExportOptions& ex = exports_;
    ex = o.exports;
    if (ex.out_dir.empty()) ex.out_dir = o.out_dir;
    if (!ex.name) ex.name = source.names();
    if (!ex.timestamp) ex.timestamp = source.timestamps();
    if (base > 0) {
      // The source counts its own frames from 0: frame base + i is its frame i; the saved
      // frames keep their default names and their indices as times.
      if (ex.name)
        ex.name = [name = ex.name, base](int64_t i) {
          return i >= base ? name(i - base) : default_frame_name(i);
        };
      if (ex.timestamp)
        ex.timestamp = [time = ex.timestamp, base](int64_t i) {
          return i >= base ? time(i - base) : static_cast<double>(i);
        };
      ex.history = std::move(history);
    }
    names_ = ex.name ? ex.name : FrameNamer(default_frame_name);
    LINGBOT_CHECK(ex.formats.empty() || !ex.out_dir.empty(), "exports need an output folder");
    for (auto& s : make_sinks(ex)) sinks.push_back(std::move(s));
    // The predictions take no colours: the input frames are kept for the others only.
    frames_wanted_ = sinks.size() > (predictions_ ? 1u : 0u) || o.on_result || o.sky_mask;
    outputs_ = std::make_unique<OutputThreads>(std::move(sinks), o.output_queue);
  }

  bool wants_frames() const { return frames_wanted_; }
  const ExportOptions& exports() const { return exports_; }
  void set_optimized(const LoopClosing::Poses& p) {
    if (predictions_) predictions_->set_optimized(p.c2w, p.scale);
  }
  void add_window(const WindowAlignment& w) {
    if (predictions_) predictions_->add_window(w);
  }

  // `stats` only where a session's statistics are known (streaming).
  void deliver(const FrameResult& result, std::shared_ptr<const Tensor> frame,
               const CacheStats* stats) {
    const auto t0 = Clock::now();
    // Sky masking finalises the confidence, so that every output sees the same.
    std::optional<FrameResult> masked;
    if (o_.sky_mask) {
      LINGBOT_CHECK(frame, "sky masking: frame " + std::to_string(result.index) + " was not kept");
      masked = result;
      o_.sky_mask->apply(*masked, *frame, names_(result.index));
      report_.outputs["sky mask"] += since(t0);
    }
    const FrameResult& r = masked ? *masked : result;
    if (!all_finite(r)) note_non_finite(r.index);
    if (stats && stats_.is_open()) write_cache_stats(stats_, r, *stats);
    if (!outputs_->empty()) {
      const auto t1 = Clock::now();
      outputs_->add(std::make_shared<const FrameResult>(r), frame);
      report_.wait_outputs += since(t1);
    }
    if (o_.on_result) o_.on_result(r, frame ? *frame : Tensor());
    ++report_.frames;
    callbacks_ += since(t0);
  }

  // Seconds spent delivering since the last call: device time excludes them.
  double take_callback_seconds() { return std::exchange(callbacks_, 0.0); }

  void finish(const std::string& input_error) {
    outputs_->finish();
    for (const auto& [name, seconds] : outputs_->busy()) report_.outputs[name] += seconds;
    report_.notes = outputs_->notes();
    if (report_.frames == 0)
      throw Error(input_error.empty() ? "no frames to process" : input_error);
  }

 private:
  static bool all_finite(const FrameResult& r) {
    auto finite = [](const auto& a) {
      return std::all_of(a.begin(), a.end(), [](float x) { return std::isfinite(x); });
    };
    return finite(r.pose_enc) && finite(r.c2w) && finite(r.intrinsics) && finite(r.depth) &&
           finite(r.confidence);
  }
  void note_non_finite(int64_t index) {
    if (report_.non_finite_frames++ == 0 && o_.warn) {
      const std::string line = "frame " + std::to_string(index) +
                               " has non-finite values in its results (the model's output); "
                               "exports that cannot hold them skip them";
      o_.warn(line.c_str());
    }
    if (report_.first_non_finite.size() < 5) report_.first_non_finite.push_back(index);
  }

  const RunOptions& o_;
  RunReport& report_;
  std::shared_ptr<PredictionsWriter> predictions_;  // among the outputs; null without a folder
  FrameNamer names_;                                // the frames' names, for the sky masks' files
  ExportOptions exports_;                           // o.exports completed from the source
  std::ofstream stats_;
  std::unique_ptr<OutputThreads> outputs_;
  bool frames_wanted_ = false;
  double callbacks_ = 0;
};

// Streaming: frames from the prefetch, one push each, results through the delivery.
// `resumed`: the session continued from RunOptions::resume (null: a new one), `base` the index
// of its next frame.
std::string run_streaming(Engine& engine, FrameSource& source, const RunOptions& o,
                          Delivery& delivery, RunReport& report, std::unique_ptr<Session> resumed,
                          int64_t base, const StreamOptions& resumed_options,
                          std::unique_ptr<LoopClosing>& loops) {
  StreamOptions options = resumed ? resumed_options : o.stream;
  if (options.keyframe_interval == 0)
    options.keyframe_interval = source.live() ? 1 : auto_keyframe_interval(source.count());
  const int threads =
      o.read_threads > 0
          ? o.read_threads
          : static_cast<int>(std::clamp(std::thread::hardware_concurrency(), 1u, 4u));
  // A live source's frames age while they wait: read one ahead, and let the source drop.
  FramePrefetch prefetch(source, threads, source.live() ? 1 : o.prefetch);
  report.read_threads = prefetch.threads();
  // Loop closure: descriptors from the session, keyframes to the detector's thread and the
  // pose graph's.
  if (o.loop) {
    options.descriptors = true;
    LoopClosing::Config c;
    c.detect = *o.loop;
    if (c.detect->min_gap <= 0)
      c.detect->min_gap = int64_t{options.window} * options.keyframe_interval;
    // A resumed session's saved frames are not in the graph: its loops are detected only.
    c.close = o.close_loops && !resumed;
    if (c.close && loop_closure_available() && c.detect->frame_memory <= 0)
      c.detect->frame_memory = o.loop_frame_memory;
    c.edge = o.loop_edge;
    c.graph = o.pose_graph;
    c.stream = options;
    c.on_loop = o.on_loop;
    c.on_solve = o.on_loop_solve;
    loops = std::make_unique<LoopClosing>(std::move(c), &engine);
  }
  const bool keep_frames = delivery.wants_frames() || loops;
  std::unique_ptr<Session> session = resumed ? std::move(resumed) : engine.start(options);
  // Relocalizing numbers the frames from 0 again: the outputs hold a run of their own.
  const int64_t shift = o.relocalize ? base : 0;
  // Frames wait here for their results, which arrive up to a scale block later.
  std::map<int64_t, std::pair<std::shared_ptr<const Tensor>, Clock::time_point>> waiting;
  // Latency and the time between results, over the frames after the scale block and over those
  // once the window is full (the steady state, where each step costs the same).
  struct Pace {
    LatencyHistogram latency;
    double gaps = 0;
    int64_t gap_count = 0;
    void add(double latency_s, std::optional<double> gap_s) {
      latency.add(latency_s);
      if (gap_s) {
        gaps += *gap_s;
        ++gap_count;
      }
    }
  } streaming, steady;
  Clock::time_point last_result;
  auto on_result = [&](const FrameResult& result) {
    std::optional<FrameResult> shifted;
    if (shift) {
      shifted = result;
      shifted->index -= shift;
    }
    const FrameResult& r = shifted ? *shifted : result;
    const CacheStats stats = session->cache_stats();
    const auto now = Clock::now();
    auto it = waiting.find(r.index);
    std::shared_ptr<const Tensor> frame;
    if (it != waiting.end()) {
      if (result.index >= options.scale_frames) {
        const double latency = std::chrono::duration<double>(now - it->second.second).count();
        std::optional<double> gap;  // from the previous result, itself after the scale block
        if (result.index > std::max<int64_t>(options.scale_frames, base))
          gap = std::chrono::duration<double>(now - last_result).count();
        streaming.add(latency, gap);
        if (stats.stored_frames >= options.scale_frames + options.window) steady.add(latency, gap);
      }
      frame = std::move(it->second.first);
      waiting.erase(it);
    }
    last_result = now;
    if (loops) loops->add(r, frame);
    delivery.deliver(r, delivery.wants_frames() ? std::move(frame) : nullptr, &stats);
  };
  std::string input_error;
  Clock::time_point streaming_start;
  for (int64_t pushed = 0;; ++pushed) {
    if (o.stop && o.stop()) {
      report.stopped = true;
      break;
    }
    std::optional<Tensor> frame;
    const auto t0 = Clock::now();
    try {
      frame = prefetch.next();
    } catch (const Error& e) {
      // A source that fails part way ends the run as its end would: the frames before it are
      // delivered and written, then the run fails with the source's error.
      input_error = e.what();
    }
    report.wait_input += since(t0);
    if (!frame) break;
    auto shared = std::make_shared<const Tensor>(std::move(*frame));
    const auto t1 = Clock::now();
    if (base + pushed == std::max<int64_t>(options.scale_frames, base)) streaming_start = t1;
    waiting.emplace(base - shift + pushed, std::make_pair(keep_frames ? shared : nullptr, t1));
    session->push(*shared, on_result);
    report.device += since(t1) - delivery.take_callback_seconds();
  }
  const auto t1 = Clock::now();
  session->finish(on_result);
  report.device += since(t1) - delivery.take_callback_seconds();
  // After the last complete frame, also when `stop` (Ctrl-C) ended the input.
  if (!o.save_session.empty()) {
    const auto t2 = Clock::now();
    session->save(o.save_session);
    report.save_seconds = since(t2);
    report.saved_session = o.save_session;
  }
  if (loops) loops->finish(report);
  const int64_t streamed = report.frames - std::max<int64_t>(options.scale_frames - base, 0);
  if (streamed > 0 && streaming_start != Clock::time_point{})
    report.streaming_fps = streamed / since(streaming_start);
  const Pace& p = steady.latency.count() > 0 ? steady : streaming;
  report.latency_steady = &p == &steady;
  report.latency_p50_ms = p.latency.percentile_ms(0.5);
  report.latency_p99_ms = p.latency.percentile_ms(0.99);
  report.frame_ms = p.gap_count > 0 ? 1e3 * p.gaps / p.gap_count : 0;
  return input_error;
}

// Windowed: windows step back over their overlaps, so frames come from the source as they are
// asked for, and those of the current window stay until their stitched results leave.
std::string run_windowed_mode(Engine& engine, FrameSource& source, const RunOptions& o,
                              Delivery& delivery, RunReport& report) {
  LINGBOT_CHECK(!source.live(), "windowed mode needs a folder or a video file, not a live source");
  LINGBOT_CHECK(source.count() > 0, "windowed mode needs the number of frames in advance");
  std::map<int64_t, std::shared_ptr<const Tensor>> frames;
  // `stop` ends the input as a source that fails there would (the window ends, those before it
  // are aligned and written), without the failure.
  const std::string stopped = "stopped";
  auto frame_at = [&](int64_t i) -> Tensor {
    if (o.stop && o.stop()) {
      report.stopped = true;
      throw Error(stopped);
    }
    const auto t0 = Clock::now();
    std::optional<Tensor> t = source.get(i);
    report.wait_input += since(t0);
    if (!t) throw Error("the source has no frame " + std::to_string(i));
    if (delivery.wants_frames()) frames[i] = std::make_shared<const Tensor>(*t);
    return *t;
  };
  auto on_result = [&](const FrameResult& r) {
    frames.erase(frames.begin(), frames.lower_bound(r.index));
    auto it = frames.find(r.index);
    delivery.deliver(r, it == frames.end() ? nullptr : it->second, nullptr);
  };
  report.read_threads = 1;
  const auto t0 = Clock::now();
  const WindowedRun w = run_windowed(
      engine, source.count(), frame_at, *o.windowed, on_result,
      [&](const WindowAlignment& a) { delivery.add_window(a); }, o.log);
  report.device += since(t0) - delivery.take_callback_seconds() - report.wait_input;
  report.windows = static_cast<int64_t>(w.windows.size());
  return report.stopped && w.source_error == stopped ? "" : w.source_error;
}

std::string ms(double seconds, int64_t frames);

// The pose graph's part of the report: the edges the model measured, each solve, the costs.
std::string describe_loop_closure(const RunReport& r) {
  char line[400];
  int accepted = 0;
  std::map<std::string, int> dropped;
  for (const LoopEdge& e : r.loop_edges) {
    if (e.accepted)
      ++accepted;
    else
      ++dropped[e.reason];
  }
  const auto edges = static_cast<int64_t>(r.loop_edges.size());
  std::snprintf(line, sizeof line,
                "\nloop closure (pose graph, own thread): %lld loop edges measured by the model "
                "(%d into the graph",
                static_cast<long long>(edges), accepted);
  std::string s = line;
  for (const auto& [reason, n] : dropped) s += ", " + std::to_string(n) + " dropped: " + reason;
  s += ")";
  if (r.loop_edges_unmeasured > 0)
    s += ", " + std::to_string(r.loop_edges_unmeasured) + " not measured (frame not kept)";
  const auto solves = static_cast<int64_t>(r.loop_solves.size());
  std::snprintf(line, sizeof line,
                "; %s a two-frame block, %lld solves in %.1f ms; the run waited %.1f ms for "
                "the last, %.1f ms rewriting the exports",
                ms(r.loop_measure_s, edges).c_str(), static_cast<long long>(solves),
                1e3 * r.loop_solve_s, 1e3 * r.loop_finish_wait_s, 1e3 * r.loop_rewrite_s);
  s += line;
  for (const LoopEdge& e : r.loop_edges) {
    std::snprintf(line, sizeof line,
                  "\nloop edge: frame %lld to frame %lld: scale %.4g (stream/pair %.4g, %.4g), "
                  "rotation %.2f deg from the essential matrix's, epipolar error %.2f px: %s%s",
                  static_cast<long long>(e.query), static_cast<long long>(e.match),
                  e.edge.relative.s, e.scale_query, e.scale_match, e.rotation_error_deg,
                  e.epipolar_error_px, e.accepted ? "into the graph" : "dropped, ",
                  e.accepted ? "" : e.reason.c_str());
    s += line;
  }
  for (const LoopReport& p : r.loop_solves) {
    const PoseGraphSummary& g = p.summary;
    std::snprintf(line, sizeof line,
                  "\nsolve %lld: %lld keyframes, %d loops kept, %d switched off; correction up "
                  "to %.4g in position, %.3f deg, scale %.3g %%; %.1f ms",
                  static_cast<long long>(p.version), static_cast<long long>(p.nodes), g.accepted,
                  g.rejected, g.max_translation, g.max_rotation_deg,
                  100 * std::expm1(g.max_scale_change), 1e3 * g.seconds);
    s += line;
  }
  return s;
}

std::string ms(double seconds, int64_t frames) {
  char b[32];
  std::snprintf(b, sizeof b, "%.1f ms", frames > 0 ? 1e3 * seconds / frames : 0.0);
  return b;
}

}  // namespace

RunReport run(Engine& engine, FrameSource& source, const RunOptions& o) {
  LINGBOT_CHECK_ARG(!(o.loop && o.windowed), "loop closure runs in streaming mode only");
  LINGBOT_CHECK_ARG(o.resume.empty() || !o.windowed,
                    "a saved session is resumed in streaming mode only");
  LINGBOT_CHECK_ARG(o.save_session.empty() || !o.windowed,
                    "windowed runs cannot be saved as a session: each window starts a new one");
  RunReport report;
  // The engine's stage totals before the run: the report gets what they grew by during it.
  const std::map<std::string, double> profile_before = engine.profile_ms();
  const auto t0 = Clock::now();
  // A resumed session first: its saved frames decide how the outputs number the new ones.
  std::unique_ptr<Session> resumed;
  int64_t base = 0;
  StreamOptions resumed_options;
  std::vector<FrameResult> history;
  if (!o.resume.empty()) {
    const SnapshotInfo info = read_snapshot_info(o.resume);
    ResumeOptions ro;
    if (o.loop) ro.descriptors = true;
    const auto t1 = Clock::now();
    resumed = engine.resume(o.resume, ro);
    report.resume_seconds = since(t1);
    base = info.frames;
    resumed_options = info.options;
    report.resumed_frames = base;
    report.relocalized = o.relocalize;
    if (!o.relocalize) history = resumed->trajectory();
  }
  Delivery delivery(source, o, report, o.relocalize ? 0 : base, std::move(history));
  std::unique_ptr<LoopClosing> loops;
  const std::string input_error =
      o.windowed ? run_windowed_mode(engine, source, o, delivery, report)
                 : run_streaming(engine, source, o, delivery, report, std::move(resumed), base,
                                 resumed_options, loops);
  if (loops && loops->closes()) {
    delivery.set_optimized(loops->optimized());
    report.c2w_optimized = loops->optimized().c2w;
    report.scale_optimized = loops->optimized().scale;
  }
  delivery.finish(input_error);
  if (loops) loops->write_exports(delivery.exports(), &source, report);
  report.seconds = since(t0);
  report.dropped = source.dropped();
  const FrameSource::Times t = source.times();
  report.decode = t.decode;
  report.preprocess = t.preprocess;
  for (const auto& [stage, ms] : engine.profile_ms()) {
    const auto it = profile_before.find(stage);
    report.profile_ms[stage] = ms - (it == profile_before.end() ? 0 : it->second);
  }
  if (!input_error.empty())
    throw Error(input_error + "; the results of the " + std::to_string(report.frames) +
                " frames before it are in " +
                (o.out_dir.empty() ? "the results" : o.out_dir + "/"));
  return report;
}

std::string describe(const RunReport& r) {
  char line[320];
  std::snprintf(line, sizeof line, "%lld frames in %.2f s (%.2f frames/s",
                static_cast<long long>(r.frames), r.seconds, r.fps());
  std::string s = line;
  if (r.streaming_fps > 0) {
    std::snprintf(line, sizeof line, "; %.2f after the scale block", r.streaming_fps);
    s += line;
  }
  s += ")\n";
  const int64_t n = r.frames;
  s += "per frame: device " + ms(r.device, n) + ", waiting for input " + ms(r.wait_input, n) +
       ", waiting for outputs " + ms(r.wait_outputs, n) + "\n";
  s += "beside it: decode " + ms(r.decode, n) + " + preprocess " + ms(r.preprocess, n) + " on " +
       std::to_string(r.read_threads) + " reader thread" + (r.read_threads == 1 ? "" : "s");
  // The stage that sets the pace: the one whose work per frame, over its threads, is longest.
  std::string slowest = "device";
  double slowest_s = r.device;
  if ((r.decode + r.preprocess) / std::max(r.read_threads, 1) > slowest_s) {
    slowest = "reading";
    slowest_s = (r.decode + r.preprocess) / std::max(r.read_threads, 1);
  }
  for (const auto& [name, seconds] : r.outputs) {
    s += ", " + name + " " + ms(seconds, n);
    if (seconds > slowest_s) {
      slowest = "the " + name + " output";
      slowest_s = seconds;
    }
  }
  s += "\n";
  if (r.latency_p50_ms > 0) {
    std::snprintf(line, sizeof line, "latency from push to result%s: p50 %.1f ms, p99 %.1f ms",
                  r.latency_steady ? " (window full)" : "", r.latency_p50_ms, r.latency_p99_ms);
    s += line;
    if (r.frame_ms > 0) {
      std::snprintf(line, sizeof line, " (%.2f frame times; a result every %.1f ms)",
                    r.latency_p99_ms / r.frame_ms, r.frame_ms);
      s += line;
    }
    s += "\n";
  }
  s += "slowest stage: " + slowest + " (" + ms(slowest_s, n) + " a frame)";
  if (r.non_finite_frames) {
    s += "\nnon-finite results in " + std::to_string(r.non_finite_frames) + " frame" +
         (r.non_finite_frames == 1 ? "" : "s") + " (first:";
    for (int64_t i : r.first_non_finite) s += " " + std::to_string(i);
    s += ")";
  }
  for (const std::string& note : r.notes) s += "\n" + note;
  if (r.resumed_frames > 0 && r.frames > 0) {
    const int64_t first = r.relocalized ? 0 : r.resumed_frames;
    std::snprintf(line, sizeof line,
                  "\n%s a saved session of %lld frames: frames %lld to %lld placed against its "
                  "map%s",
                  r.relocalized ? "relocalized in" : "continued",
                  static_cast<long long>(r.resumed_frames), static_cast<long long>(first),
                  static_cast<long long>(first + r.frames - 1),
                  r.relocalized ? " (its trajectory is not in the outputs)" : "");
    s += line;
  }
  if (!r.saved_session.empty()) s += "\nsession saved to " + r.saved_session;
  if (!r.profile_ms.empty()) {
    s += "\nmodel stages (LINGBOT_PROFILE), a frame:";
    for (const auto& [stage, total_ms] : r.profile_ms)
      s += " " + stage + " " + ms(total_ms / 1e3, n) + ";";
    s.pop_back();
  }
  if (r.loop_detection) {
    const LoopStats& l = r.loop_stats;
    std::snprintf(line, sizeof line,
                  "\nloop detection (own thread): %lld keyframes, %lld candidates verified, "
                  "%lld loops; %s features + %s retrieval + %s verification a keyframe",
                  static_cast<long long>(l.keyframes), static_cast<long long>(l.candidates),
                  static_cast<long long>(l.accepted), ms(l.extract_s, l.keyframes).c_str(),
                  ms(l.retrieve_s, l.keyframes).c_str(), ms(l.verify_s, l.keyframes).c_str());
    s += line;
    std::snprintf(line, sizeof line, "; the run waited %.1f ms for it at the end",
                  1e3 * l.finish_wait_s);
    s += line;
    if (l.skipped > 0) s += "; " + std::to_string(l.skipped) + " keyframes skipped (queue full)";
    for (const LoopClosure& c : r.loops) {
      const PairVerification& v = c.verification;
      std::snprintf(line, sizeof line,
                    "\nloop: frame %lld sees frame %lld (similarity %.3f, %d inliers of %d "
                    "matches, %.0f %%)",
                    static_cast<long long>(c.query), static_cast<long long>(c.match), c.similarity,
                    v.inliers, v.matches, 100.0 * v.inlier_ratio);
      s += line;
    }
  }
  if (r.loop_closure) s += describe_loop_closure(r);
  return s;
}

std::string to_json(const RunReport& r) {
  nlohmann::ordered_json j = {{"frames", r.frames},
                              {"seconds", r.seconds},
                              {"fps", r.fps()},
                              {"streaming_fps", r.streaming_fps},
                              {"dropped", r.dropped},
                              {"windows", r.windows},
                              {"stopped", r.stopped},
                              {"device_s", r.device},
                              {"wait_input_s", r.wait_input},
                              {"wait_outputs_s", r.wait_outputs},
                              {"decode_s", r.decode},
                              {"preprocess_s", r.preprocess},
                              {"read_threads", r.read_threads},
                              {"outputs_s", r.outputs},
                              {"latency_p50_ms", r.latency_p50_ms},
                              {"latency_p99_ms", r.latency_p99_ms},
                              {"latency_steady", r.latency_steady},
                              {"frame_ms", r.frame_ms},
                              {"non_finite_frames", r.non_finite_frames},
                              {"first_non_finite", r.first_non_finite},
                              {"notes", r.notes}};
  if (r.resumed_frames > 0)
    j["resumed"] = {{"saved_frames", r.resumed_frames},
                    {"mode", r.relocalized ? "relocalize" : "continue"},
                    {"first_frame", r.relocalized ? 0 : r.resumed_frames},
                    {"frames_placed_against_saved_map", r.frames},
                    {"resume_s", r.resume_seconds}};
  if (!r.saved_session.empty()) {
    j["saved_session"] = r.saved_session;
    j["save_s"] = r.save_seconds;
  }
  if (!r.profile_ms.empty()) j["profile_ms"] = r.profile_ms;
  if (r.loop_detection) {
    const LoopStats& l = r.loop_stats;
    j["loop_detection"] = {{"keyframes", l.keyframes},   {"skipped", l.skipped},
                           {"candidates", l.candidates}, {"accepted", l.accepted},
                           {"extract_s", l.extract_s},   {"retrieve_s", l.retrieve_s},
                           {"verify_s", l.verify_s},     {"finish_wait_s", l.finish_wait_s}};
    nlohmann::ordered_json loops = nlohmann::ordered_json::array();
    for (const LoopClosure& c : r.loops)
      loops.push_back({{"query", c.query},
                       {"match", c.match},
                       {"similarity", c.similarity},
                       {"matches", c.verification.matches},
                       {"inliers", c.verification.inliers},
                       {"inlier_ratio", c.verification.inlier_ratio}});
    j["loops"] = std::move(loops);
  }
  if (r.loop_closure) {
    nlohmann::ordered_json edges = nlohmann::ordered_json::array();
    for (const LoopEdge& e : r.loop_edges) {
      const Sim3& z = e.edge.relative;
      edges.push_back({{"query", e.query},
                       {"match", e.match},
                       {"accepted", e.accepted},
                       {"reason", e.reason},
                       {"relative", {{"q", z.q}, {"t", z.t}, {"s", z.s}}},
                       {"scale_query", e.scale_query},
                       {"scale_match", e.scale_match},
                       {"depth_pairs_query", e.depth_pairs_query},
                       {"depth_pairs_match", e.depth_pairs_match},
                       {"rotation_error_deg", e.rotation_error_deg},
                       {"epipolar_error_px", e.epipolar_error_px},
                       {"seconds", e.seconds}});
    }
    nlohmann::ordered_json solves = nlohmann::ordered_json::array();
    for (const LoopReport& p : r.loop_solves) {
      const PoseGraphSummary& g = p.summary;
      nlohmann::ordered_json added = nlohmann::ordered_json::array();
      for (const LoopOutcome& l : p.new_loops)
        added.push_back({{"from", l.from},
                         {"to", l.to},
                         {"score", l.score},
                         {"accepted", l.accepted},
                         {"residual", l.residual},
                         {"reason", l.reason}});
      solves.push_back({{"version", p.version},
                        {"nodes", p.nodes},
                        {"new_loops", std::move(added)},
                        {"accepted", g.accepted},
                        {"rejected", g.rejected},
                        {"max_translation", g.max_translation},
                        {"max_rotation_deg", g.max_rotation_deg},
                        {"max_scale_change", g.max_scale_change},
                        {"initial_cost", g.initial_cost},
                        {"final_cost", g.final_cost},
                        {"seconds", g.seconds}});
    }
    j["loop_closure"] = {{"edges", std::move(edges)},    {"unmeasured", r.loop_edges_unmeasured},
                         {"solves", std::move(solves)},  {"measure_s", r.loop_measure_s},
                         {"solve_s", r.loop_solve_s},    {"finish_wait_s", r.loop_finish_wait_s},
                         {"rewrite_s", r.loop_rewrite_s}};
  }
  return j.dump();
}

}  // namespace lingbot
