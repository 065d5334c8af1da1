// What `run` and `demo` share: pull frames from a source, stream them through a session, hand
// results to the outputs.
#pragma once

#include <functional>
#include <optional>
#include <string>

#include "lingbot/engine.h"

namespace lingbot::cli {

// Returns the next frame (F32 [3, H, W] in [0, 1]) or nothing at the end.
using FrameSource = std::function<std::optional<Tensor>()>;

struct RunOutputs {
  std::string out_dir;
  std::string cache_stats_path;  // JSON lines, empty = none
  bool quiet = false;
};

struct RunSummary {
  int64_t frames = 0;
  double seconds = 0;
};

RunSummary run_stream(Engine& engine, const StreamOptions& options, const FrameSource& source,
                      const RunOutputs& outputs);

}  // namespace lingbot::cli
