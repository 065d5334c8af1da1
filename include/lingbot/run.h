// Public API: a whole run, as `lingbot-map run` does it, in a pipeline of threads so that the
// device sets the pace:
//
//   source: decode + preprocess on reader threads, a bounded prefetch handed out in frame order
//     -> the session's step, on the calling thread
//     -> outputs: predictions.safetensors, cache statistics, and each export on its own thread
//        behind a bounded queue, every one in frame order
//
//   auto source = lingbot::open_source("clip.mp4", {}, [](const lingbot::ImageU8& img) {
//     return lingbot::model_input(img, lingbot::PreprocessMode::Crop, 518);
//   });
//   lingbot::RunOptions o{.out_dir = "out"};
//   o.exports.formats = lingbot::parse_export_list("tum,ply");
//   lingbot::RunReport r = lingbot::run(*engine, *source, o);
//   std::puts(lingbot::describe(r).c_str());
//
// Memory stays bounded whatever the speed of the source or the disk: a full queue makes the
// stage before it wait (a live source then drops its oldest frames, as when the model is slow).
// Results are those of pushing the frames one by one: the pipeline changes no arithmetic.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "lingbot/engine.h"
#include "lingbot/exports.h"
#include "lingbot/loop.h"
#include "lingbot/sky_mask.h"
#include "lingbot/source.h"
#include "lingbot/windowed.h"

namespace lingbot {

struct RunOptions {
  // Streaming: a keyframe_interval of 0 picks auto_keyframe_interval(frames of the source).
  StreamOptions stream;
  std::optional<WindowedOptions> windowed;  // set: windowed mode with these options
  // predictions.safetensors and the exports go here; empty = no files (results only through
  // on_result).
  std::string out_dir;
  // exports.out_dir empty = out_dir; exports.name and exports.timestamp empty = the source's.
  ExportOptions exports;
  // More outputs of the caller's, each on its own thread like the exports (a viewer, a socket).
  std::vector<std::shared_ptr<ResultSink>> sinks;
  std::string cache_stats_path;  // KV-cache counters per frame as JSON lines; empty = none
  // Set: each result's confidence is multiplied by its frame's non-sky mask before any output
  // (the predictions file, the exports, the sinks and on_result) sees it. Its time is reported
  // as the output "sky mask".
  std::shared_ptr<SkyMasker> sky_mask;
  int prefetch = 4;      // frames read ahead of the device (a live source: 1, the newest counts)
  int read_threads = 0;  // readers for sources read in any order; 0 = up to 4, one per core
  int output_queue = 8;  // results waiting for each output before the device waits for it
  // Each result in frame order, on the calling thread, with the frame the model saw (F32
  // [3, H, W]); a slow callback slows the run.
  std::function<void(const FrameResult&, const Tensor& frame)> on_result;
  // Polled before each frame: true ends the input as its end would (Ctrl-C): the frames read so
  // far are finished and every output is written; the report says `stopped`.
  std::function<bool()> stop;
  std::function<void(const char*)> log;  // a line per window in windowed mode
  // Called once, at the first frame whose results hold a non-finite value (pose, intrinsics,
  // depth or confidence: a diverging model or a bad checkpoint); the report counts them all.
  std::function<void(const char*)> warn;
  // Set: loop closure beside the stream (streaming mode only; see lingbot/loop.h). The session
  // then computes place descriptors (StreamOptions::descriptors), every keyframe goes to a
  // LoopDetector's thread, and the report lists the accepted loops. min_gap 0 = the frames the
  // model still attends to: window x keyframe interval. Where the pose graph is built in
  // (loop_closure_available(), Ceres) and `close_loops` holds, every keyframe also goes to a
  // LoopCloser, each verified loop (the one with the most inliers per keyframe) is measured by
  // the model as a Sim(3) edge (measure_loop_edge, on the detector's thread) and, unless its
  // checks drop it, added to the graph. At the end predictions.safetensors gets c2w_optimized,
  // w2c_optimized and scale_optimized, the TUM and KITTI trajectories get an _optimized twin,
  // and the point and camera exports (ply, glb, colmap, nerfstudio) are rewritten from the
  // optimized poses. Without Ceres, or in a resumed run (`resume`), loops are detected and
  // reported only.
  std::optional<LoopOptions> loop;
  bool close_loops = true;
  LoopEdgeOptions loop_edge;
  PoseGraphOptions pose_graph;
  // Bytes of keyframe inputs kept for the loop edges' two-frame blocks (LoopOptions::
  // frame_memory when that is 0): 1 GiB, ~1,800 keyframes at 518x378, thinned evenly beyond.
  int64_t loop_frame_memory = int64_t{1} << 30;
  // Each accepted loop as it is found, on the detector's thread.
  std::function<void(const LoopClosure&)> on_loop;
  // Streaming only. Set: the run continues the session saved in this file (Engine::resume)
  // instead of starting one: its frames are placed against the saved map, in its coordinate
  // frame; `stream` is then the saved session's (only its descriptors follow `loop`).
  std::string resume;
  // With `resume`: false (continue) numbers the frames on from the saved ones and begins the
  // camera-only exports (tum, kitti, json) with the saved frames' cameras, so that they hold the
  // whole sequence; true (relocalize) numbers them from 0 and writes none of the saved
  // trajectory: the saved scale frames and window are context only.
  bool relocalize = false;
  // Set: the session is saved here (Session::save) after the last frame, also when `stop` ended
  // the input: a later run can resume it.
  std::string save_session;
  // Each solve of the pose graph, on the closer's thread: the loops it added (frames, score,
  // accepted or switched off) and the correction's size (LoopReport::summary).
  std::function<void(const LoopReport&)> on_loop_solve;
};

// Where the time went. The device thread's wall time splits into device (its steps), waiting
// for input and waiting for the outputs; the readers' and outputs' work runs beside it.
struct RunReport {
  int64_t frames = 0;
  int64_t dropped = 0;   // live sources: frames dropped because the model was slower
  int64_t windows = 0;   // windowed mode
  bool stopped = false;  // `stop` ended the input before its end
  double seconds = 0;    // wall time, from the first frame asked for to the last file written
  // Streaming: frames after the scale block per second of the device thread from the first of
  // them to the last result (how `lingbot-map bench` counts, there after a warm-up sequence).
  double streaming_fps = 0;
  double device = 0, wait_input = 0, wait_outputs = 0;  // seconds of the device thread
  double decode = 0, preprocess = 0;                    // seconds of work, all reader threads
  int read_threads = 0;
  std::map<std::string, double> outputs;  // seconds of work per output (each on its thread)
  // Streaming: from a frame's push to its result, over the frames once the window is full (the
  // steady state: latency_steady) or, in a run too short to fill it, over all frames after the
  // scale block (those wait for the block to fill); 0 when there were none. frame_ms: the mean
  // time between consecutive results over the same frames.
  double latency_p50_ms = 0, latency_p99_ms = 0, frame_ms = 0;
  bool latency_steady = false;
  // Frames whose results hold a non-finite value, and the first few of them; what each output
  // left out for them (formats that cannot hold such values skip those frames or points).
  int64_t non_finite_frames = 0;
  std::vector<int64_t> first_non_finite;
  std::vector<std::string> notes;
  // While the environment asks for profiling (lingbot/profile.h): milliseconds per model stage
  // over this run (what the engine's totals grew by during it); empty otherwise.
  std::map<std::string, double> profile_ms;
  // RunOptions::loop: what the detector found and what it cost (its own thread's work, and the
  // run's wait for it at the end).
  bool loop_detection = false;
  LoopStats loop_stats;
  std::vector<LoopClosure> loops;
  // RunOptions::resume: the frames of the saved session, and whether the run relocalized (its
  // frames, all placed against the saved map, then numbered from 0) or continued it.
  int64_t resumed_frames = 0;
  bool relocalized = false;
  std::string saved_session;  // RunOptions::save_session, once written
  // Seconds to read and rebuild the resumed session, and to write the saved one.
  double resume_seconds = 0, save_seconds = 0;
  // The pose graph, when it ran (RunOptions::close_loops with Ceres): each loop measured by the
  // model (accepted or dropped by its checks, and why), each solve, and the costs: the two-frame
  // blocks (detector thread), the solves (the closer's thread), the run's wait for the last
  // solve, and the rewrite of the exports from the optimized poses at the end.
  bool loop_closure = false;
  std::vector<LoopEdge> loop_edges;
  std::vector<LoopReport> loop_solves;
  int64_t loop_edges_unmeasured = 0;  // loops whose frame was no longer kept (frame_memory)
  double loop_measure_s = 0, loop_solve_s = 0, loop_finish_wait_s = 0, loop_rewrite_s = 0;
  // With loop_closure: every frame's optimized c2w (row-major 3x4, rigid) and scale, by frame
  // index, as predictions.safetensors' c2w_optimized and scale_optimized (48 + 4 bytes a frame).
  std::vector<std::array<float, 12>> c2w_optimized;
  std::vector<float> scale_optimized;
  double fps() const { return seconds > 0 ? frames / seconds : 0; }
};

// Runs every frame of `source` through a session of `engine` (or its windows) and writes the
// outputs. Throws Error when an output fails (the files written so far stay valid), and, after
// writing the results of the frames before it, when the source fails part way.
RunReport run(Engine& engine, FrameSource& source, const RunOptions& options);

// "150 frames in 3.41 s (44.0 frames/s) ..." and, per frame, the stages' shares: several lines.
std::string describe(const RunReport& report);
// The report as one JSON object.
std::string to_json(const RunReport& report);

}  // namespace lingbot
