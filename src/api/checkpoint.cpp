#include "lingbot/checkpoint.h"

#include <map>
#include <memory>

#include "backend/ops.h"
#include "lingbot/error.h"
#include "model/config.h"
#include "model/model.h"
#include "model/weight_loader.h"
#include "weights/checkpoint.h"
#include "weights/safetensors.h"
#include "weights/torch_pt_writer.h"

namespace lingbot {
namespace {

// synthetic:SEED as a checkpoint: build the model once on the CPU and keep what it asked for.
TensorMap synthetic_checkpoint(const std::string& spec, const std::string& arch) {
  const std::string seed = spec.substr(spec.find(':') + 1);
  LINGBOT_CHECK(!seed.empty() && seed.size() <= 19 &&
                    seed.find_first_not_of("0123456789") == std::string::npos,
                "synthetic weights need a numeric seed, e.g. synthetic:1");
  auto cpu = make_cpu_backend();
  WeightLoader loader(std::stoull(seed), *cpu);
  TensorMap tensors;
  loader.record_into(&tensors);
  Model model(*cpu, loader, ModelConfig::preset(arch));
  return tensors;
}

}  // namespace

CheckpointSummary inspect_checkpoint(const std::string& path) {
  const TensorMap tensors = load_checkpoint(path);
  CheckpointSummary s;
  s.tensors = tensors.size();
  for (auto& [name, t] : tensors) {
    s.parameters += t.numel();
    s.bytes += t.nbytes();
    s.parameters_by_dtype[dtype_name(t.dtype())] += t.numel();
    s.parameters_by_module[name.substr(0, name.find('.'))] += t.numel();
  }
  try {
    const ModelConfig c = ModelConfig::infer(tensors);
    s.arch = c.arch;
    s.dim = c.dim;
    s.depth = c.depth;
    s.heads = c.heads;
    s.dino_depth = c.dino_depth;
  } catch (const Error& e) {
    s.arch_error = e.what();
  }
  return s;
}

ConvertSummary convert_checkpoint(const std::string& input, const std::string& output,
                                  const ConvertOptions& o) {
  static const std::map<std::string, DType> kTypes = {
      {"bf16", DType::BF16}, {"f32", DType::F32}, {"f16", DType::F16}};
  TensorMap tensors = input.rfind("synthetic:", 0) == 0 ? synthetic_checkpoint(input, o.arch)
                                                        : load_checkpoint(input);
  if (!o.dtype.empty()) {
    auto it = kTypes.find(o.dtype);
    LINGBOT_CHECK(it != kTypes.end(), "unknown dtype '" + o.dtype + "' (bf16, f16 or f32)");
    for (auto& [name, t] : tensors) {
      const DType d = t.dtype();
      const bool floating =
          d == DType::F32 || d == DType::F16 || d == DType::BF16 || d == DType::F64;
      // Integer and bool tensors (indices, counters, masks) keep their exact values.
      if (floating && d != it->second) t = t.to(it->second);
    }
  }
  ConvertSummary s;
  s.tensors = tensors.size();
  for (auto& [name, t] : tensors) s.bytes += t.nbytes();
  const size_t dot = output.rfind('.');
  const std::string ext = dot == std::string::npos ? "" : output.substr(dot);
  if (ext == ".pt" || ext == ".pth")
    write_torch_checkpoint(output, tensors);
  else
    write_safetensors(output, tensors);
  return s;
}

}  // namespace lingbot
