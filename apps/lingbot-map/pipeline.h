// What `run` and `demo` share: pull frames from a source, stream them through a session, hand
// results to the outputs.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdlib>
#include <functional>
#include <optional>
#include <string>

#include "lingbot/engine.h"
#include "lingbot/exports.h"

namespace lingbot::cli {

// Returns the next frame (F32 [3, H, W] in [0, 1]) or nothing at the end.
using NextFrame = std::function<std::optional<Tensor>()>;

struct RunOutputs {
  std::string out_dir;
  std::string cache_stats_path;  // JSON lines, empty = none
  bool quiet = false;
  ExportOptions exports;
  int64_t total_frames = 0;  // for the progress bar's ETA; 0 = unknown  // written per frame as
                             // results arrive; out_dir empty = out_dir above
  std::function<double(int64_t)> timestamp;  // TUM seconds of frame i; empty = the index
  std::function<int64_t()> dropped;          // live sources: frames dropped so far
};

// Sign checks with short messages (CLI11's NonNegativeNumber prints the largest double in full).
inline CLI::Validator sign_check(bool allow_zero) {
  return CLI::Validator(
      [allow_zero](std::string& text) -> std::string {
        char* end = nullptr;
        const double v = std::strtod(text.c_str(), &end);
        if (end == text.c_str() || *end) return "not a number: " + text;
        if (v > 0 || (allow_zero && v == 0)) return "";
        return std::string("must be ") + (allow_zero ? ">= 0" : "> 0") + ", got " + text;
      },
      allow_zero ? "NONNEGATIVE" : "POSITIVE");
}
inline const CLI::Validator kNonNegative = sign_check(true);
inline const CLI::Validator kPositive = sign_check(false);

// The --export, --conf-threshold, --point-stride and --depth-scale flags of run and demo.
struct ExportArgs {
  std::string formats;
  float conf_threshold = 1.5f;
  int point_stride = 4;
  float depth_scale = 1000;
};
void add_export_options(CLI::App* sub, ExportArgs& a);
// Throws Error for an unknown format; `name` gives the exported frames' file names.
ExportOptions export_options(const ExportArgs& a, FrameNamer name);
std::string join(const std::vector<std::string>& items);  // "a, b, c"

struct RunSummary {
  int64_t frames = 0;
  double seconds = 0;
};

RunSummary run_stream(Engine& engine, const StreamOptions& options, const NextFrame& source,
                      const RunOutputs& outputs);

}  // namespace lingbot::cli
