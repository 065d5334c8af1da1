// preflight() for a run described the way the API starts one: the architecture and compute
// dtype the engine will pick, without loading the weights.
#include "backend/ops.h"
#include "stream/preflight.h"
#include "weights/checkpoint.h"

namespace lingbot {
namespace {

// The architecture and precision the engine will pick.
ModelConfig planned_config(const EngineOptions& o) {
  ModelConfig c = !o.arch.empty() ? ModelConfig::preset(o.arch)
                  : o.model.rfind("synthetic:", 0) == 0
                      ? ModelConfig::preset("lingbot-map")
                      : ModelConfig::infer(load_checkpoint(o.model));
  const int gpu = cuda_device_index(o.device);
  resolve_precision(o.precision, gpu >= 0, gpu < 0 || cuda_reads_fp8_kv(gpu), c);
  return c;
}

}  // namespace

Preflight preflight(const RunPlan& p, bool with_time) {
  const ModelConfig config = planned_config(p.engine);
  Preflight r;
  if (with_time) r.time = estimate_time(p, config);
  r.compute = config.compute;
  r.kv_cache = config.kv_fp8 ? DType::F8E4M3 : config.compute;
  if (p.windowed) {
    r.need = estimate_windowed_memory(config, r.compute, p.height, p.width, p.frames, *p.windowed,
                                      &p.results);
    r.cached_frames = window_cached_frames(p.frames, *p.windowed);
    if (p.windowed->stream.flow_threshold <= 0) {
      r.windows = static_cast<int64_t>(plan_windows(p.frames, *p.windowed).size());
      r.window_frames = longest_window(p.frames, *p.windowed);
    }
  } else {
    r.need = estimate_memory(config, r.compute, p.height, p.width, p.frames, p.stream, &p.results);
    r.cached_frames = stored_frames(p.frames, p.stream);
    r.unbounded_growth = unbounded_growth(r.need, p.stream);  // windows are bounded per window
  }
  return r;
}

MilderSettings milder_settings(const RunPlan& p, size_t available) {
  const ModelConfig config = planned_config(p.engine);
  return p.windowed ? milder_windowed_settings(config, config.compute, p.height, p.width, p.frames,
                                               *p.windowed, &p.results, available)
                    : milder_settings(config, config.compute, p.height, p.width, p.frames, p.stream,
                                      &p.results, available);
}

}  // namespace lingbot
