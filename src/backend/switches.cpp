#include "backend/switches.h"

#include <cstdlib>
#include <cstring>

namespace lingbot {
namespace {

// "0" turns a switch that is on by default off; any other value leaves it on.
bool not_zero(const char* v) {
  return std::strcmp(v, "0") != 0;
}

// LINGBOT_CUDA_VERBOSE: a number is the level; any other value means 1.
int level(const char* v) {
  return *v >= '0' && *v <= '9' ? std::atoi(v) : 1;
}

}  // namespace

const std::vector<SwitchInfo>& switch_table() {
  static const std::vector<SwitchInfo> table = {
      {"LINGBOT_CUDA_GRAPH", "1", "0: run every step's kernels directly, without recording a graph",
       [](BackendSwitches& s, const char* v) { s.cuda_graph = not_zero(v); }},
      {"LINGBOT_PDL", "1",
       "0: no programmatic dependent launches (the kernel tracer needs them off)",
       [](BackendSwitches& s, const char* v) { s.pdl = not_zero(v); }},
      {"LINGBOT_GEMM_TUNE", "1",
       "0: cuBLASLt's first heuristic choice everywhere, no timing of candidates",
       [](BackendSwitches& s, const char* v) { s.gemm_tune = not_zero(v); }},
      {"LINGBOT_CUDA_VERBOSE", "0",
       "1: step recorder counters, slow steps, each GEMM plan, memory at exit; 2: and a line per "
       "attention call",
       [](BackendSwitches& s, const char* v) { s.cuda_verbose = level(v); }},
      {"LINGBOT_ATTN_IMPL", "",
       "mma or wgmma: that tensor-core attention kernel (wgmma falls back to mma below sm_90a); "
       "generic: the generic kernel where the row kernel would run",
       [](BackendSwitches& s, const char* v) { s.attn_impl = v; }},
      {"LINGBOT_ATTN_SPLITS", "0", "N > 0: attention splits the keys N ways (0: by occupancy)",
       [](BackendSwitches& s, const char* v) { s.attn_splits = std::atoi(v); }},
      {"LINGBOT_ATTN_MODE", "0",
       "a diagnostic variant of the wgmma attention kernel (enum Mode); builds with "
       "LINGBOT_KERNEL_LAB=ON only",
       [](BackendSwitches& s, const char* v) { s.attn_mode = std::atoi(v); }},
      {"LINGBOT_CONV_WGMMA", "1", "0: the mma.sync convolution kernel on sm_90a too",
       [](BackendSwitches& s, const char* v) { s.conv_wgmma = not_zero(v); }},
      {"LINGBOT_CONV_BN", "0",
       "32, 64, 128 or 256: the convolution's output tile width where its kernel has it",
       [](BackendSwitches& s, const char* v) { s.conv_bn = std::atoi(v); }},
      {"LINGBOT_CONV_SPLITS", "0",
       "N > 0: convolutions split K N ways (within the K steps and the scratch budget)",
       [](BackendSwitches& s, const char* v) { s.conv_splits = std::atoi(v); }},
  };
  return table;
}

BackendSwitches read_switches() {
  BackendSwitches s;
  for (const SwitchInfo& info : switch_table()) {
    const char* v = std::getenv(info.name);
    if (v && *v) info.apply(s, v);
  }
  return s;
}

BackendSwitches& switches() {
  static BackendSwitches s = read_switches();
  return s;
}

}  // namespace lingbot
