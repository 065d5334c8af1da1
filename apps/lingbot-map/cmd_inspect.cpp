#include <cstdio>
#include <map>
#include <memory>
#include <string>

#include "commands.h"
#include "lingbot/checkpoint.h"
#include "lingbot/engine.h"

namespace lingbot::cli {
namespace {

std::string mb(size_t bytes) {
  char b[32];
  std::snprintf(b, sizeof b, "%.2f MB", bytes / 1e6);
  return b;
}

int inspect_snapshot(const std::string& path) {
  const SnapshotInfo s = read_snapshot_info(path);
  const StreamOptions& o = s.options;
  std::printf("%s: lingbot session snapshot (version %d), %s\n", path.c_str(), s.version,
              mb(s.bytes).c_str());
  std::printf("model: %s (width %lld, %lld block pairs, %lld heads), %s, KV cache %s, weights %s\n",
              s.arch.c_str(), static_cast<long long>(s.dim), static_cast<long long>(s.depth),
              static_cast<long long>(s.heads), s.compute.c_str(), s.kv_cache.c_str(),
              s.weights.c_str());
  std::printf(
      "frames: %lld pushed, %lld kept by the KV cache: %lld scale frames, %lld in the "
      "window, %lld evicted with their special tokens attended to; %lld buffered for the "
      "scale block\n",
      static_cast<long long>(s.frames), static_cast<long long>(s.stored_frames),
      static_cast<long long>(s.scale_frames), static_cast<long long>(s.window_frames),
      static_cast<long long>(s.special_frames), static_cast<long long>(s.pending_frames));
  if (s.height > 0)
    std::printf("frame size: %lldx%lld; trajectory: %lld cameras\n",
                static_cast<long long>(s.width), static_cast<long long>(s.height),
                static_cast<long long>(s.trajectory));
  std::printf(
      "stream: scale frames %d, window %d, keyframe interval %d, camera iterations %d, "
      "flow threshold %g, max special frames %lld\n",
      o.scale_frames, o.window, o.keyframe_interval, o.camera_iterations,
      static_cast<double>(o.flow_threshold), static_cast<long long>(o.max_special_frames));
  std::printf("bytes: KV cache %s, camera head %s, the rest %s\n", mb(s.kv_bytes).c_str(),
              mb(s.camera_bytes).c_str(), mb(s.bytes - s.kv_bytes - s.camera_bytes).c_str());
  return 0;
}

int run_inspect(const std::string& path) {
  if (is_session_snapshot(path)) return inspect_snapshot(path);
  const CheckpointSummary c = inspect_checkpoint(path);
  std::printf("%s: %zu tensors, %zu parameters, %.2f GB\n", path.c_str(), c.tensors, c.parameters,
              c.bytes / 1e9);
  if (c.arch.empty())
    std::printf("architecture: unknown (%s)\n", c.arch_error.c_str());
  else
    std::printf("architecture: %s (width %lld, %lld block pairs, %lld heads, DINO depth %lld)\n",
                c.arch.c_str(), static_cast<long long>(c.dim), static_cast<long long>(c.depth),
                static_cast<long long>(c.heads), static_cast<long long>(c.dino_depth));
  for (auto& [d, n] : c.parameters_by_dtype)
    std::printf("  dtype %-5s %zu parameters\n", d.c_str(), n);
  for (auto& [m, n] : c.parameters_by_module) std::printf("  %-12s %zu parameters\n", m.c_str(), n);
  return 0;
}

}  // namespace

void add_inspect(CLI::App& app) {
  auto path = std::make_shared<std::string>();
  CLI::App* sub = app.add_subcommand(
      "inspect", "Describe a checkpoint (tensors, dtypes, sizes) or a saved session");
  sub->add_option("model", *path, "checkpoint (.safetensors, .pt or .pth) or session snapshot")
      ->required();
  commands().push_back({sub, [path] { return run_inspect(*path); }});
}

}  // namespace lingbot::cli
