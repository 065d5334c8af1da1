// Public API: the memory preflight. What a streaming or windowed run will hold at its peak,
// computed from shapes alone (no weights, no device), so that a long run can be refused before
// it starts instead of failing with an allocation error hundreds of frames in.
//
//   lingbot::RunPlan plan{.engine = eo, .height = 378, .width = 504, .frames = 300, .stream = so};
//   lingbot::Preflight p = lingbot::preflight(plan, names);
//   if (p.need.total > available) std::puts(lingbot::explain_shortfall(names, plan, p.need,
//   available));
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "lingbot/engine.h"
#include "lingbot/windowed.h"

namespace lingbot {

// What a run keeps of its results on the host, beyond the model's own memory: passed to the
// estimates below, it is counted in MemoryEstimate::results (see estimate_result_memory).
struct ResultOutputs {
  bool predictions = true;  // predictions.safetensors: every frame's depth, confidence and pose
                            // are collected until the end of the run
  bool glb = false;         // the GLB export keeps every frame's points until the end
  int point_stride = 4;     // PointOptions::stride of the GLB points
  // Input frames the reader keeps after handing them out (windowed overlaps); 0 or 1 = none.
  int64_t recent_frames = 0;
  // Windowed mode: the results are stitched from windows, each held whole until aligned.
  bool windowed = false;
  // The model runs on the host (the CPU backend): the results then count in `total`, which is
  // checked against host memory; on a GPU they are host memory beside the device's.
  bool on_host = true;
};

struct MemoryEstimate {
  size_t weights = 0;         // transformer matrices in the compute dtype, everything else F32
  size_t kv_cache = 0;        // paged aggregator cache, all global layers, special stream included
  size_t special_stream = 0;  // part of kv_cache: the evicted frames' special tokens
  size_t camera_cache = 0;    // camera head K/V, F32, grown in whole chunks
  size_t activations = 0;     // work buffers, depth-head plan, backend scratch (see the .cpp)
  size_t results = 0;         // host: results kept for the outputs (estimate_result_memory)
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
  StreamOptions stream;
  std::optional<WindowedOptions> windowed;  // set: windowed mode with these options
  ResultOutputs results;                    // what the outputs keep on the host
};

struct Preflight {
  MemoryEstimate need;
  std::string summary;  // "300 frames at 504x378 (BF16)"
  // What the caches hold at the peak: ", 72 frames cached", or per window for windowed runs.
  std::string cached;
  // A line when most of the estimate grows with the run and a special-frame cap would bound it
  // (streaming only), else "".
  std::string note;
};

// The settings the lines below suggest changing. The caller names them (the CLI its flags), so
// that the advice speaks the caller's language; InputWidth is the preprocessing target width.
enum class Setting {
  ScaleFrames,
  Window,
  KeyframeInterval,
  MaxSpecialFrames,
  WindowSize,
  InputWidth
};
using SettingNames = std::function<std::string(Setting)>;

// Throws Error when the checkpoint cannot be read or the architecture is unknown.
Preflight preflight(const RunPlan& plan, const SettingNames& names);

// One line for a run that does not fit in `available` bytes: the numbers, and the mildest change
// of each setting that would make it fit on its own ("try NAME 12 or NAME 280 (280x210 input)").
std::string explain_shortfall(const SettingNames& names, const RunPlan& plan,
                              const MemoryEstimate& need, size_t available);

// The estimate's terms, "weights 2.4 GB, KV cache 5.1 GB, camera cache 59 MB, activations
// 4.2 GB" and ", results 1.2 GB" when results were estimated.
std::string describe_terms(const MemoryEstimate& m);

// "12.5 GB", or "57 MB" below 1 GB (decimal units, as the benchmark reports device memory).
std::string format_gb(size_t bytes);

// MemAvailable of /proc/meminfo in bytes; 0 where it cannot be read.
size_t host_memory_available();

}  // namespace lingbot
