// What `run` and `demo` share: the export flags, and a run with a progress line.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdlib>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "lingbot/engine.h"
#include "lingbot/exports.h"
#include "lingbot/run.h"
#include "lingbot/source.h"

namespace lingbot::cli {

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

// The --export, --conf-threshold, --point-stride, --voxel and --depth-scale flags of run and
// demo.
struct ExportArgs {
  std::string formats;
  float conf_threshold = 1.5f;
  int point_stride = 4;
  float voxel = 0;
  float depth_scale = 1000;
};
void add_export_options(CLI::App* sub, ExportArgs& a);
// Throws Error for an unknown format; `name` gives the exported frames' file names.
ExportOptions export_options(const ExportArgs& a, FrameNamer name);
std::string join(const std::vector<std::string>& items);  // "a, b, c"

// lingbot::run with a progress line on stderr (unless quiet) and the timing summary printed
// at the end; `json`: the report as JSON into this file. Ctrl-C or SIGTERM ends the input and the
// run finishes with the frames read so far (`stopped` in the report; a second one stops at once).
RunReport run_with_progress(Engine& engine, FrameSource& source, RunOptions options, bool quiet,
                            const std::string& json = "");

// An output folder holds one run. Throws Error when `dir` holds another run's outputs (see
// existing_run_outputs) unless `overwrite`, which removes those outputs and nothing else.
void claim_output_folder(const std::string& dir, bool overwrite);

// run.json in `dir`: what made the results there (the command line, the version, the model,
// the options, the frames and the timing), for whoever opens the folder later. Written when
// the run ends ("complete": false when it was stopped part way); replaced whole. A run that
// fails leaves none, so the folder is not taken for a run's.
nlohmann::json run_record(const Engine& engine, const EngineOptions& options, const RunOptions& run,
                          const std::string& input, int64_t frames);
void write_run_record(const std::string& dir, nlohmann::json record,
                      const RunReport* report = nullptr);

}  // namespace lingbot::cli
