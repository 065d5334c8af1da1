// Public API: the memory preflight. What a streaming or windowed run will hold at its peak,
// computed from shapes alone (no weights, no device), so that a long run can be refused before
// it starts instead of failing with an allocation error hundreds of frames in.
//
//   lingbot::RunPlan plan{.engine = eo, .height = 378, .width = 504, .frames = 300, .stream = so};
//   lingbot::Preflight p = lingbot::preflight(plan);
//   if (p.need.total > available) {
//     lingbot::MilderSettings m = lingbot::milder_settings(plan, available);
//     if (m.window) std::printf("try a window of %d frames\n", *m.window);
//   }
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "lingbot/engine.h"
#include "lingbot/exports.h"
#include "lingbot/windowed.h"

namespace lingbot {

// What a run keeps of its results on the host, beyond the model's own memory: passed to the
// estimates below, it is counted in MemoryEstimate::results (see estimate_result_memory).
struct ResultOutputs {
  bool predictions = true;  // predictions.safetensors: every frame's cameras are collected
                            // until the end of the run (the maps go to disk as they come)
  // F32 maps of the frame size that the caller keeps of every frame in memory: an API that
  // returns the whole run (the Python module's: 2 for depth and confidence, more with images).
  int kept_maps = 0;
  bool glb = false;      // the GLB export keeps every frame's points until the end
  int point_stride = 4;  // PointOptions::stride of the GLB points
  // Point exports (PLY, GLB, COLMAP) thinned by PointOptions::voxel: a fixed table each.
  int voxel_filters = 0;
  // Input frames the reader keeps after handing them out (windowed overlaps); 0 or 1 = none.
  int64_t recent_frames = 0;
  // Windowed mode: the results are stitched from windows, each held whole until aligned.
  bool windowed = false;
  // The model runs on the host (the CPU backend): the results then count in `total`, which is
  // checked against host memory; on a GPU they are host memory beside the device's.
  bool on_host = true;
};

// What the exports of `exports` keep on the host (the GLB's points, the point exports' voxel
// tables); the caller adds what else its run keeps (kept_maps, recent_frames, on_host, ...).
ResultOutputs export_outputs(const ExportOptions& exports);

struct MemoryEstimate {
  size_t weights = 0;         // transformer matrices in the compute dtype, everything else F32
  size_t kv_cache = 0;        // paged aggregator cache, all global layers, special stream included
  size_t special_stream = 0;  // part of kv_cache: the evicted frames' special tokens
  size_t camera_cache = 0;    // camera head K/V (compute dtype), grown in whole chunks
  size_t activations = 0;     // work buffers, depth-head plan, backend scratch: the parts below
  // The parts of `activations`, each as its component reports it: the work buffers of the first
  // step (the scale frames at once, freed after it; the camera head's scratch for that many
  // frames), those of the one-frame steps, the depth head's plan (its activations for one
  // frame, kept), the backend's scratch block and GEMM workspace, and a margin of a tenth for
  // the pool's rounding and the small per-step tables.
  struct ActivationParts {
    size_t first_step = 0, one_frame_steps = 0, depth_plan = 0, scratch = 0, margin = 0;
  } activation_parts;
  size_t results = 0;  // host: results kept for the outputs (estimate_result_memory)
  // What must fit where the model runs: weights, caches and activations, and the results when
  // they share that memory (ResultOutputs::on_host).
  size_t total = 0;
};

// A run as it is about to start.
struct RunPlan {
  // What Engine::create will get; with no arch the checkpoint is opened for its shapes only.
  EngineOptions engine;
  int64_t height = 0, width = 0;  // model input, after preprocessing
  int64_t frames = 0;             // frames of the run (live sources: what the caches keep)
  StreamOptions stream;           // streaming mode's
  // Set: windowed mode with these options (each window streams with their `stream`).
  std::optional<WindowedOptions> windowed;
  ResultOutputs results;  // what the outputs keep on the host
};

// What a run will cost in time: the FLOPs of its steps counted from the architecture, over the
// rate this device sustains (on the CPU a short matrix product measured once a process, about
// 0.2 s; on a GPU its stated bf16 peak), each scaled by the fraction of it that whole steps
// reached in our runs. A planning figure, within about a factor of two.
struct TimeEstimate {
  double frame_flops = 0;        // one streamed frame with the window full
  double scale_block_flops = 0;  // the first step: the scale frames together
  double rate = 0;               // FLOP/s a step is expected to sustain here; 0 = unknown
  std::string device;            // what the rate is of, for messages
  double frame_seconds() const;
  double scale_block_seconds() const;
};

struct Preflight {
  MemoryEstimate need;
  TimeEstimate time;
  DType compute = DType::F32;   // the dtype the engine will compute in
  DType kv_cache = DType::F32;  // ... and store the KV cache in (F8E4M3: the fp8 cache)
  // Frames the caches hold at the peak: of the run, or of one window in windowed mode.
  int64_t cached_frames = 0;
  // Windowed mode with a fixed keyframe interval: the windows planned and the frames of the
  // longest (the first); 0 otherwise.
  int64_t windows = 0, window_frames = 0;
  // Streaming with no special-frame cap: the bytes of the estimate that grow with the run (the
  // special stream and the camera caches) when they are more than half of it, else 0.
  // StreamOptions::max_special_frames bounds them.
  size_t unbounded_growth = 0;
};

// Throws Error when the checkpoint cannot be read or the architecture is unknown. With
// `with_time` false, `time` is left empty (rate 0): callers that want the memory only (admission
// control, a second plan beside one already estimated) skip counting the FLOPs and, on the CPU,
// the rate measurement of the process's first estimate (about 0.2 s).
Preflight preflight(const RunPlan& plan, bool with_time = true);

// For a run that does not fit: the mildest change of each setting that would make it fit on its
// own, all else unchanged. Unset where no value does, or where the setting does not apply to the
// run's mode.
struct MilderSettings {
  std::optional<int> window;             // StreamOptions::window (windowed: WindowedOptions'
                                         // stream.window, each window's sliding window)
  std::optional<int> keyframe_interval;  // streaming
  std::optional<int> scale_frames;       // streaming
  std::optional<int> window_size;        // windowed
  // The largest StreamOptions::max_special_frames (or WindowedOptions') that fits, when the
  // special stream and the camera caches grow with the run.
  std::optional<int> max_special_frames;
  // A smaller preprocessing width (the `target` of model_input), and the model input's height
  // at that width.
  std::optional<int> input_width, input_height;
};

// The milder settings with which the run of `plan` needs at most `available` bytes.
MilderSettings milder_settings(const RunPlan& plan, size_t available);

// MemAvailable of /proc/meminfo in bytes; 0 where it cannot be read.
size_t host_memory_available();

// Bytes predictions.safetensors takes on disk for `frames` frames of height x width (a windowed
// run adds 68 bytes a window). It grows as the run goes, so a run checks the folder's free space
// against it before the first frame.
size_t predictions_file_bytes(int64_t height, int64_t width, int64_t frames);

// Bytes free to an unprivileged writer on the file system that holds `path`, or would hold it
// (its nearest existing parent); 0 where that cannot be found out.
size_t disk_space_available(const std::string& path);

}  // namespace lingbot
