#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>
#include <set>
#include <string>

#include "commands.h"
#include "lingbot/error.h"
#include "lingbot/image.h"
#include "lingbot/preflight.h"
#include "lingbot/run.h"
#include "lingbot/sky_mask.h"
#include "lingbot/source.h"
#include "lingbot/windowed.h"
#include "pipeline.h"
#include "preflight_text.h"
#include "viewer_args.h"

namespace lingbot::cli {
namespace {

struct RunArgs {
  EngineOptions engine;
  StreamOptions stream{.keyframe_interval = 0};
  std::string input, preprocess = "crop", out, cache_stats;
  int size = 518;
  bool quiet = false;
  ExportArgs exports;
  std::string mode = "streaming";
  int window_size = 64, overlap = 16, overlap_keyframes = -1;
  bool no_preflight = false, dry_run = false, overwrite = false;
  double memory_limit_gb = 0;  // > 0: the memory the run may use, instead of what is free
  double fps = 10;             // video files, as the reference demo's default
  int stride = 1;
  int64_t first_k = 0;
  bool realtime = false;
  std::string json;  // the timing report as JSON
  ViewerArgs viewer;
  bool rotate_clockwise_90 = false;
  SkyMaskOptions sky;
  bool loop_closure = false;
  LoopOptions loop;
  std::string save_session, resume, resume_mode = "continue";
  LoopEdgeOptions loop_edge;
};

PreprocessMode parse_mode(const std::string& m) {
  if (m == "crop") return PreprocessMode::Crop;
  if (m == "pad") return PreprocessMode::Pad;
  if (m == "none") return PreprocessMode::None;
  throw Error("unknown --preprocess mode '" + m + "' (crop, pad or none)");
}

// Each window streams with the run's stream options; windowed mode has no automatic keyframe
// interval (0, the default, is every frame).
WindowedOptions windowed_options(const RunArgs& a) {
  WindowedOptions w{.window_size = a.window_size,
                    .overlap = a.overlap,
                    .overlap_keyframes = a.overlap_keyframes,
                    .stream = a.stream};
  w.stream.keyframe_interval = std::max(1, w.stream.keyframe_interval);
  return w;
}

// Creates the output folder and checks that files can be made in it, so that a bad --out fails
// before the model loads rather than after the last frame (a read-only file system counts even
// for root; permissions do not bind root, whose writes then succeed anyway).
void prepare_output_folder(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec || !std::filesystem::is_directory(dir))
    throw Error("cannot create output folder " + dir + ": " +
                (ec ? ec.message() : std::string("a file of that name is in the way")));
  if (::access(dir.c_str(), W_OK) != 0)
    throw Error("cannot write to output folder " + dir + ": " + std::strerror(errno));
}

// A preflight and the plan it was made for.
struct PlannedRun {
  RunPlan plan;
  Preflight estimate;
  const MemoryEstimate& need() const { return estimate.need; }
};

// What the run's outputs keep of its results on the host, for the estimate.
ResultOutputs result_outputs(const RunArgs& a, const ExportOptions& exports, int64_t keep_recent) {
  ResultOutputs r = export_outputs(exports);
  r.recent_frames = keep_recent;
  r.on_host = a.engine.device == "cpu";
  return r;
}

// Throws, before the first frame runs, when the estimate exceeds what the run may use: the
// --memory-limit-gb cap, else free device memory after loading (the weights already resident
// there count as available), else the host's available memory. Unknown memory passes. On a GPU
// the results kept on the host are checked against the host's available memory too.
void check_fits(const PlannedRun& p, const RunArgs& a, const Engine& engine) {
  if (!p.plan.results.on_host) {
    const size_t host = host_memory_available();
    if (host && p.need().results > host)
      throw Error("not enough host memory for " + describe_run(p.plan, p.estimate) +
                  ": the results kept for the " + "outputs need ~" + format_gb(p.need().results) +
                  ", " + format_gb(host) +
                  " available: process fewer frames (--first-k, --stride, --fps), a smaller "
                  "--size, or export without glb (--no-preflight skips this check)");
  }
  size_t available = 0;
  if (a.memory_limit_gb > 0) {
    available = static_cast<size_t>(a.memory_limit_gb * 1e9);
  } else if (a.engine.device == "cpu") {
    const size_t host = host_memory_available();
    available = host ? host + p.need().weights : 0;
  } else {
    const size_t free = engine.device_memory_free();
    available = free ? free + p.need().weights : 0;
  }
  if (available == 0 || p.need().total <= available) return;
  throw Error("not enough memory for " + describe_run(p.plan, p.estimate) + ": " +
              explain_shortfall(p.plan, p.need(), available) +
              " (--no-preflight skips this check)");
}

int run(const RunArgs& a) {
  const PreprocessMode mode = parse_mode(a.preprocess);
  // The model sees patches of 14 pixels: a width that is not a multiple would fail inside it.
  if (mode != PreprocessMode::None && (a.size < 14 || a.size % 14 != 0))
    throw Error("--size " + std::to_string(a.size) +
                " is not a positive multiple of the patch size 14 (e.g. 518, 504, 280)");
  if (a.mode != "streaming" && a.mode != "windowed")
    throw Error("unknown --mode '" + a.mode + "' (streaming or windowed)");
  const bool windowed = a.mode == "windowed";
  SourceOptions in{.fps = a.fps,
                   .stride = a.stride,
                   .first_k = a.first_k,
                   .quiet = a.quiet,
                   .realtime = a.realtime};
  if (windowed) {
    // Windows step back over their overlap; keeping those frames avoids decoding a video again.
    in.keep_recent =
        1 +
        std::max<int64_t>({a.overlap, a.stream.scale_frames,
                           int64_t{a.overlap_keyframes} * std::max(1, a.stream.keyframe_interval)});
    in.exact_count = true;  // the window plan needs the length
  }
  auto input = open_source(a.input, in, [&](const ImageU8& img) {
    return model_input(a.rotate_clockwise_90 ? rotate_clockwise_90(img) : img, mode, a.size);
  });
  LINGBOT_CHECK_ARG(!(windowed && a.loop_closure), "--loop-closure runs in streaming mode only");
  LINGBOT_CHECK_ARG(!a.loop_closure || loop_detection_available(),
                    "--loop-closure: this build has no loop detection (OpenCV, libopencv-dev, "
                    "was not found when it was configured)");
  LINGBOT_CHECK(!(windowed && input->live()),
                "--mode windowed needs a folder or a video file, not a live source");
  LINGBOT_CHECK_ARG(!windowed || (a.resume.empty() && a.save_session.empty()),
                    "--resume and --save-session need --mode streaming (windowed runs start a "
                    "new session in every window)");
  LINGBOT_CHECK_ARG(a.resume_mode == "continue" || a.resume_mode == "relocalize",
                    "unknown --resume-mode '" + a.resume_mode + "' (continue or relocalize)");
  // A saved session brings its own stream options, and its frames count toward the caches; a
  // file that is not a whole snapshot fails here, before the model loads.
  std::optional<SnapshotInfo> saved;
  if (!a.resume.empty()) saved = read_snapshot_info(a.resume);
  // Live sources have no length: the estimate covers the frames the caches keep for good.
  const int64_t frames =
      (input->count() > 0 ? input->count() : int64_t{a.stream.scale_frames} + a.stream.window) +
      (saved ? saved->frames : 0);
  RunOptions o{.out_dir = a.out, .cache_stats_path = a.cache_stats};
  o.exports = export_options(a.exports, {});
  // A folder's frames have no times: the MCAP stamps count them at --fps (10 by default).
  if (a.fps > 0) o.exports.frame_rate = a.fps;
  const int64_t keep_recent = in.keep_recent;
  StreamOptions stream = saved ? saved->options : a.stream;
  // The model was trained with video RoPE over 320 views; longer videos keep about that many
  // keyframes, as the reference demo does.
  if (stream.keyframe_interval == 0) stream.keyframe_interval = auto_keyframe_interval(frames);
  if (!a.sky.visualization_dir.empty() && a.sky.model.empty() && a.sky.dir.empty())
    throw Error("--sky-mask-visualization-dir needs --mask-sky or --sky-mask-dir");
  // The model loads (and is tried once) before anything else, so that a bad one fails at once.
  if (!a.dry_run && (!a.sky.model.empty() || !a.sky.dir.empty()))
    o.sky_mask = std::make_shared<SkyMasker>(a.sky);
  if (!a.dry_run) {
    prepare_output_folder(a.out);
    claim_output_folder(a.out, a.overwrite);
  }
  // The size the model sees is known only after preprocessing (a video keeps the frame, so the
  // run does not decode it again).
  std::optional<PlannedRun> pre;
  if (a.dry_run || !a.no_preflight) {
    std::optional<Tensor> first = input->get(0);
    if (!first) throw Error(a.input + ": has no frames");
    PlannedRun p;
    p.plan = {.engine = a.engine,
              .height = first->dim(1),
              .width = first->dim(2),
              .frames = frames,
              .stream = stream,
              .results = result_outputs(a, o.exports, keep_recent)};
    if (windowed) p.plan.windowed = windowed_options(a);
    p.estimate = preflight(p.plan);
    pre = p;
  }
  // predictions.safetensors grows on disk as the run goes: a run of known length checks that it
  // fits in the output folder before the first frame rather than failing at the frame that
  // fills the disk.
  const size_t disk_need =
      pre && input->count() > 0
          ? predictions_file_bytes(pre->plan.height, pre->plan.width, input->count())
          : 0;
  const size_t disk_free = disk_need ? disk_space_available(a.out) : 0;
  if (a.dry_run) {
    const MemoryEstimate& m = pre->need();
    // On a GPU the results are host memory, listed but not in the device total.
    std::printf("memory estimate for %s%s: ~%s (%s%s)\n",
                describe_run(pre->plan, pre->estimate).c_str(),
                describe_cached(pre->plan, pre->estimate).c_str(), format_gb(m.total).c_str(),
                describe_terms(m).c_str(), pre->plan.results.on_host ? "" : " on the host");
    std::printf("%s\n", describe_pools(m).c_str());
    bool fits = true;
    if (a.memory_limit_gb > 0 || a.engine.device == "cpu") {
      const size_t available = a.memory_limit_gb > 0 ? static_cast<size_t>(a.memory_limit_gb * 1e9)
                                                     : host_memory_available();
      fits = !available || m.total <= available;
      if (!fits)
        std::printf("%s\n", explain_shortfall(pre->plan, m, available).c_str());
      else if (available)
        std::printf("fits in %s available\n", format_gb(available).c_str());
    } else {
      std::printf("free GPU memory is checked when the run starts\n");
    }
    const std::string note = growth_note(pre->estimate);
    if (fits && !note.empty()) std::printf("%s\n", note.c_str());
    if (const std::string t = describe_time(pre->plan, pre->estimate); !t.empty())
      std::printf("%s\n", t.c_str());
    if (const std::string h = cpu_size_hint(pre->plan, pre->estimate); !h.empty())
      std::printf("%s\n", h.c_str());
    if (disk_need)
      std::printf("predictions.safetensors: ~%s on disk, %s free in %s\n",
                  format_gb(disk_need).c_str(), format_gb(disk_free).c_str(), a.out.c_str());
    return 0;
  }
  if (!a.no_preflight && disk_free && disk_need > disk_free)
    throw Error("not enough disk space in " + a.out + " for predictions.safetensors: ~" +
                format_gb(disk_need) + " for " + std::to_string(input->count()) + " frames, " +
                format_gb(disk_free) +
                " free: process fewer frames (--first-k, --stride, --fps) or a smaller --size "
                "(--no-preflight skips this check)");
  // The viewer binds before the model loads, so that a port in use fails at once.
  std::shared_ptr<ViewerServer> viewer;
  if (a.viewer.enabled) {
    viewer = start_viewer(a.viewer, {.conf_threshold = 1.0f, .stride = a.exports.point_stride},
                          a.exports.conf_threshold);
    o.sinks.push_back(viewer_sink(*viewer, std::max<int64_t>(0, input->count())));
  }
  // What the run will cost, from the first second: the estimate, then the model's load.
  if (pre && !a.quiet) {
    std::fprintf(stderr, "%s%s: ~%s\n", describe_run(pre->plan, pre->estimate).c_str(),
                 describe_cached(pre->plan, pre->estimate).c_str(),
                 format_gb(pre->need().total).c_str());
    for (const std::string& line :
         {describe_time(pre->plan, pre->estimate), cpu_size_hint(pre->plan, pre->estimate)})
      if (!line.empty()) std::fprintf(stderr, "%s\n", line.c_str());
  }
  const auto load_start = std::chrono::steady_clock::now();
  if (!a.quiet)
    std::fprintf(stderr, "loading %s on %s ...\n", a.engine.model.c_str(), a.engine.device.c_str());
  auto engine = Engine::create(a.engine);
  if (!a.quiet) {
    const ModelInfo mi = engine->info();
    std::fprintf(
        stderr, "loaded %s (%.0fM parameters, %s, %s) in %.1f s\n", mi.arch.c_str(),
        mi.parameters / 1e6, mi.backend.c_str(), mi.compute.c_str(),
        std::chrono::duration<double>(std::chrono::steady_clock::now() - load_start).count());
  }
  if (pre) check_fits(*pre, a, *engine);
  o.stream = stream;
  if (a.loop_closure) {
    o.loop = a.loop;
    o.loop_edge = a.loop_edge;
  }
  o.resume = a.resume;
  o.relocalize = a.resume_mode == "relocalize";
  o.save_session = a.save_session;
  if (windowed) {
    o.windowed = windowed_options(a);
    o.log = [&](const char* line) {
      if (!a.quiet) std::fprintf(stderr, "%s\n", line);
    };
  }
  const nlohmann::json record = run_record(*engine, a.engine, o, a.input, input->count());
  const RunReport r = run_with_progress(*engine, *input, o, a.quiet, a.json);
  write_run_record(a.out, record, &r);
  if (windowed)
    std::printf("%lld frames in %lld windows, %.2f s; wrote %s/predictions.safetensors\n",
                static_cast<long long>(r.frames), static_cast<long long>(r.windows), r.seconds,
                a.out.c_str());
  else
    std::printf("%lld frames in %.2f s (%.2f frames/s); wrote %s/predictions.safetensors\n",
                static_cast<long long>(r.frames), r.seconds, r.fps(), a.out.c_str());
  if (input->live())
    std::printf("%lld frames dropped (the model was slower than the source)\n",
                static_cast<long long>(r.dropped));
  if (!o.exports.formats.empty())
    std::printf("exports in %s/: %s\n", a.out.c_str(), join(o.exports.formats).c_str());
  if (r.resumed_frames > 0)
    std::printf(
        "%s %s (%lld saved frames, read in %.3f s): frames %lld to %lld placed "
        "against its map\n",
        r.relocalized ? "relocalized in" : "continued", a.resume.c_str(),
        static_cast<long long>(r.resumed_frames), r.resume_seconds,
        static_cast<long long>(r.relocalized ? 0 : r.resumed_frames),
        static_cast<long long>((r.relocalized ? 0 : r.resumed_frames) + r.frames - 1));
  if (!r.saved_session.empty()) {
    std::error_code ec;
    const auto bytes = std::filesystem::file_size(r.saved_session, ec);
    std::printf("session saved to %s (%lld frames, %.2f MB, %.3f s)\n", r.saved_session.c_str(),
                static_cast<long long>(r.resumed_frames + r.frames), ec ? 0.0 : bytes / 1e6,
                r.save_seconds);
  }
  if (o.sky_mask) {
    const SkyMasker::Counts c = o.sky_mask->counts();
    std::printf("sky masks: %lld computed, %lld reused%s%s\n", static_cast<long long>(c.computed),
                static_cast<long long>(c.reused), a.sky.dir.empty() ? "" : " from ",
                a.sky.dir.c_str());
  }
  if (viewer) {
    std::fflush(stdout);
    serve_until_interrupted(*viewer);
  }
  // A live source ends with Ctrl-C; any other run cut short says so (128 + SIGINT, as a shell).
  return r.stopped && !input->live() ? 130 : 0;
}

}  // namespace

void add_stream_options(CLI::App* sub, EngineOptions& e, StreamOptions& s) {
  sub->add_option("--model", e.model, "checkpoint (.safetensors/.pt) or synthetic:SEED")
      ->required();
  sub->add_option("--arch", e.arch, "lingbot-map or tiny (default: from the checkpoint)");
  sub->add_option("--device", e.device, "cpu, cuda or cuda:N")->capture_default_str();
  sub->add_option("--threads", e.threads, "CPU threads (0 = all cores)")->check(kNonNegative);
  sub->add_option("--precision", e.precision,
                  "auto, f32, bf16 or fp8 (the KV cache in e4m3; auto picks it on the GPU)")
      ->capture_default_str();
  sub->add_option("--gpu-path", e.gpu_path,
                  "auto, hopper or portable (the kernels of sm_80/86/89 GPUs, on any GPU)")
      ->capture_default_str()
      ->check(CLI::IsMember({"auto", "hopper", "portable"}));
  sub->add_option("--scale-frames", s.scale_frames, "frames of phase 1, kept forever")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 16));
  sub->add_option("--window", s.window, "sliding window of cached frames")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 20));
  sub->add_option("--keyframe-interval", s.keyframe_interval,
                  "cache every N-th frame (0 = auto: ceil(frames / 320) beyond 320 frames)")
      ->capture_default_str()
      ->check(CLI::Range(0, 1 << 20));
  sub->add_option("--camera-iterations", s.camera_iterations, "camera-head refinement steps")
      ->capture_default_str()
      ->check(CLI::Range(1, 64));
  sub->add_option("--flow-threshold", s.flow_threshold,
                  "adaptive keyframes: keep a frame when its reprojection motion since the last "
                  "keyframe exceeds this many pixels (0 = off, fixed interval)")
      ->capture_default_str()
      ->check(kNonNegative);
  sub->add_option("--max-non-keyframe-gap", s.max_non_keyframe_gap,
                  "adaptive keyframes: force a keyframe after this many frames")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 20));
  sub->add_option("--max-special-frames", s.max_special_frames,
                  "bounded memory: attend to the special tokens of only the N most recently "
                  "evicted frames (0 = all, as the reference)")
      ->capture_default_str()
      ->check(kNonNegative);
}

void add_run(CLI::App& app) {
  auto a = std::make_shared<RunArgs>();
  CLI::App* sub = app.add_subcommand("run", "Reconstruct a sequence of frames");
  add_stream_options(sub, a->engine, a->stream);
  sub->add_option("--input", a->input,
                  "folder of PNG/JPEG frames, video file, capture device (/dev/videoN) or stream "
                  "URL (rtsp://, http://, udp://, ...)")
      ->required();
  sub->add_option("--fps", a->fps,
                  "video files: keep every round(source fps / F)-th frame (0 = every frame)")
      ->capture_default_str()
      ->check(kNonNegative);
  sub->add_option("--first-k", a->first_k, "only the first K frames (before --stride; 0 = all)")
      ->capture_default_str()
      ->check(kNonNegative);
  sub->add_option("--stride", a->stride, "then every N-th of those frames")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 20));
  sub->add_flag("--realtime", a->realtime,
                "video files: play at the source's rate as a live source would (frames the model "
                "cannot keep up with are dropped)");
  sub->add_option("--preprocess", a->preprocess, "crop, pad (to --size) or none (as is)")
      ->capture_default_str();
  sub->add_option("--mode", a->mode, "streaming, or windowed (independent aligned windows)")
      ->capture_default_str();
  sub->add_option("--window-size", a->window_size,
                  "windowed: KV slots per window (scale + keyframes)")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 20));
  sub->add_option("--overlap", a->overlap, "windowed: frames shared by consecutive windows")
      ->capture_default_str()
      ->check(CLI::Range(0, 1 << 20));
  sub->add_option("--overlap-keyframes", a->overlap_keyframes,
                  "windowed: overlap in keyframes (wins over --overlap)");
  sub->add_option("--size", a->size, "model input width for crop/pad")->capture_default_str();
  sub->add_flag("--rotate-clockwise-90", a->rotate_clockwise_90,
                "turn every picture a quarter turn clockwise before preprocessing (portrait "
                "videos stored sideways)");
  sub->add_option("--mask-sky", a->sky.model,
                  "sky segmentation ONNX model (the reference's skyseg.onnx): sky pixels get "
                  "confidence 0, so the points and every export lose them");
  sub->add_option("--sky-mask-dir", a->sky.dir,
                  "sky masks, one PNG per frame: read when present and of the frame's size, else "
                  "computed with --mask-sky and written (alone: masks from this folder only)");
  sub->add_option("--sky-mask-visualization-dir", a->sky.visualization_dir,
                  "write frame | mask | sky tinted red, side by side, one PNG per frame");
  sub->add_option("--out", a->out, "output folder")->required();
  sub->add_option("--save-session", a->save_session,
                  "save the session here after the last frame (also on Ctrl-C or SIGTERM), for "
                  "--resume");
  sub->add_option("--resume", a->resume,
                  "continue a session saved by --save-session: the frames are placed in its map "
                  "(its stream options apply)");
  sub->add_option("--resume-mode", a->resume_mode,
                  "continue (number on, the saved cameras begin tum/kitti/json) or relocalize "
                  "(the saved map as context only; frames numbered from 0)")
      ->capture_default_str();
  sub->add_flag("--overwrite", a->overwrite,
                "replace the results of an earlier run in --out (only the files runs write)");
  sub->add_option("--cache-stats", a->cache_stats,
                  "write KV-cache counters per frame (JSON lines)");
  sub->add_flag("--quiet", a->quiet, "no per-frame progress or timing summary");
  sub->add_option("--json", a->json, "write the timing report (frames/s, stages, latency) as JSON");
  sub->add_flag("--dry-run", a->dry_run, "print the memory estimate and exit");
  sub->add_flag("--no-preflight", a->no_preflight, "skip the check that the run fits in memory");
  // Hidden: for tests, and for users who want a cap below what is free.
  sub->add_option("--memory-limit-gb", a->memory_limit_gb, "memory the run may use (GB)")
      ->check(kPositive)
      ->group("");
  add_export_options(sub, a->exports);
  sub->add_flag("--view", a->viewer.enabled,
                "show the run in the browser viewer as it streams (http://127.0.0.1:PORT/), "
                "and keep serving it after the run until Ctrl-C");
  add_viewer_options(sub, a->viewer);
  sub->add_flag("--loop-closure", a->loop_closure,
                "close loops beside the stream (streaming mode): retrieve earlier keyframes by "
                "the DINO trunk's place descriptor, verify them on the images (ORB, RANSAC "
                "fundamental matrix), measure each verified loop's Sim(3) with the model (the two "
                "frames as one block) and correct the keyframes in a pose graph (Ceres) on its "
                "own thread; predictions.safetensors gets c2w_optimized, tum/kitti an _optimized "
                "twin, ply/glb/colmap/nerfstudio are rewritten from the optimized poses; the "
                "report lists each loop, edge and solve");
  sub->add_option("--loop-min-gap", a->loop.min_gap,
                  "loop detection: candidates are at least this many frames older (0 = window x "
                  "keyframe interval: frames the model no longer attends to)")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 40));
  sub->add_option("--loop-top-k", a->loop.top_k,
                  "loop detection: most similar candidates verified per keyframe")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000));
  sub->add_option("--loop-min-inliers", a->loop.min_inliers,
                  "loop detection: RANSAC inliers a verified loop needs")
      ->capture_default_str()
      ->check(CLI::Range(8, 1 << 20));
  sub->add_option("--loop-min-inlier-ratio", a->loop.min_inlier_ratio,
                  "loop detection: share of the ratio-test matches that must be inliers")
      ->capture_default_str()
      ->check(CLI::Range(0.0f, 1.0f));
  sub->add_option("--loop-min-similarity", a->loop.min_similarity,
                  "loop detection: cosine floor of the descriptor retrieval")
      ->capture_default_str()
      ->check(CLI::Range(-1.0f, 1.0f));
  sub->add_option("--loop-max-rotation", a->loop_edge.max_rotation_deg,
                  "loop closure: an edge is dropped when the model's relative rotation is this "
                  "many degrees from the essential matrix's")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 180.0));
  sub->add_option("--loop-max-epipolar", a->loop_edge.max_epipolar_px,
                  "loop closure: an edge is dropped when the inliers lie this many pixels (mean) "
                  "from the epipolar lines of the model's relative pose")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1e6));
  commands().push_back({sub, [a] { return run(*a); }});
}

}  // namespace lingbot::cli
