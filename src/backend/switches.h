// The backends' tuning and diagnostic switches: one table of LINGBOT_* environment variables
// (name, default, meaning), read once into a BackendSwitches when the first backend starts. The
// kernels and the dispatch read the struct, never the environment, so what a run used is one
// value that tests and benchmarks set directly (switches() is writable for them) instead of
// changing the environment under a running backend. src/backend/cuda/README.md lists the table.
//
// Process-level variables that are not a backend's tuning stay where they act: LINGBOT_PROFILE
// (util/profile.cpp), LINGBOT_FFMPEG_LOG (FFmpeg's log level, io/video.cpp and
// render/encoder.cpp), LINGBOT_SERVE_TOKEN (the CLI's `serve`), and the tests' fixtures.
#pragma once

#include <string>
#include <vector>

namespace lingbot {

struct BackendSwitches {
  bool cuda_graph = true;  // LINGBOT_CUDA_GRAPH: record each step as a CUDA graph and replay it
  bool pdl = true;         // LINGBOT_PDL: programmatic dependent launches where the GPU has them
  bool gemm_tune = true;   // LINGBOT_GEMM_TUNE: time cuBLASLt's candidates for large products
  int cuda_verbose = 0;    // LINGBOT_CUDA_VERBOSE: 0 quiet, 1 counters and plans, 2 every attention
  std::string attn_impl;   // LINGBOT_ATTN_IMPL: "" automatic, "mma", "wgmma" or "generic"
  int attn_splits = 0;     // LINGBOT_ATTN_SPLITS: forced key splits of attention, 0 automatic
  int attn_mode = 0;       // LINGBOT_ATTN_MODE: a lab variant of the wgmma kernel, 0 the default
  bool conv_wgmma = true;  // LINGBOT_CONV_WGMMA: the wgmma convolution where the GPU has it
  int conv_bn = 0;         // LINGBOT_CONV_BN: forced output tile width (32/64/128/256), 0 automatic
  int conv_splits = 0;     // LINGBOT_CONV_SPLITS: forced split-K count of convolutions, 0 automatic

  bool operator==(const BackendSwitches&) const = default;
};

struct SwitchInfo {
  const char* name;           // the environment variable
  const char* default_value;  // what an unset (or empty) variable means
  const char* meaning;
  void (*apply)(BackendSwitches&, const char* value);  // value: non-empty
};

// The table, in the order src/backend/cuda/README.md lists it.
const std::vector<SwitchInfo>& switch_table();

// The switches as the environment sets them now: the one place that reads it.
BackendSwitches read_switches();

// The process's switches: read_switches() on the first call, which each backend makes when it
// starts. Tests and benchmarks assign fields to compare variants on one backend.
BackendSwitches& switches();

}  // namespace lingbot
