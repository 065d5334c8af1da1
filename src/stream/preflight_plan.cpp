// preflight() for a run described the way the API starts one: the architecture and compute
// dtype the engine will pick, without loading the weights.
#include "stream/preflight.h"
#include "weights/checkpoint.h"

namespace lingbot {
namespace {

ModelConfig planned_config(const EngineOptions& o) {
  if (!o.arch.empty()) return ModelConfig::preset(o.arch);
  if (o.model.rfind("synthetic:", 0) == 0) return ModelConfig::preset("lingbot-map");
  return ModelConfig::infer(load_checkpoint(o.model));
}

// As the engine resolves EngineOptions::precision.
DType planned_compute(const EngineOptions& o) {
  return o.precision == "bf16" || (o.precision == "auto" && o.device == "cuda") ? DType::BF16
                                                                                : DType::F32;
}

}  // namespace

Preflight preflight(const RunPlan& p, const SettingNames& names) {
  const ModelConfig config = planned_config(p.engine);
  const DType compute = planned_compute(p.engine);
  Preflight r;
  if (p.windowed) {
    r.need = estimate_windowed_memory(config, compute, p.height, p.width, p.frames, *p.windowed,
                                      &p.results);
    r.cached = describe_windows(p.frames, *p.windowed);
  } else {
    r.need = estimate_memory(config, compute, p.height, p.width, p.frames, p.stream, &p.results);
    r.cached = ", " + std::to_string(stored_frames(p.frames, p.stream)) + " frames cached";
    r.note = growth_note(names, r.need, p.stream);  // windowed runs are bounded per window
  }
  r.summary = std::to_string(p.frames) + " frames at " + std::to_string(p.width) + "x" +
              std::to_string(p.height) + " (" + dtype_name(compute) + ")";
  return r;
}

std::string explain_shortfall(const SettingNames& names, const RunPlan& p,
                              const MemoryEstimate& need, size_t available) {
  const ModelConfig config = planned_config(p.engine);
  const DType compute = planned_compute(p.engine);
  return p.windowed ? explain_windowed_shortfall(names, need, available, config, compute, p.height,
                                                 p.width, p.frames, *p.windowed, &p.results)
                    : explain_shortfall(names, need, available, config, compute, p.height, p.width,
                                        p.frames, p.stream, &p.results);
}

}  // namespace lingbot
