#include <cstdio>
#include <map>
#include <memory>
#include <string>

#include "backend/ops.h"
#include "commands.h"
#include "lingbot/error.h"
#include "model/model.h"
#include "model/weight_loader.h"
#include "weights/checkpoint.h"
#include "weights/safetensors.h"

namespace lingbot::cli {
namespace {

struct ConvertOptions {
  std::string in, out, dtype, arch = "lingbot-map";
};

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

int run_convert(const ConvertOptions& o) {
  static const std::map<std::string, DType> kTypes = {
      {"bf16", DType::BF16}, {"f32", DType::F32}, {"f16", DType::F16}};
  TensorMap tensors =
      o.in.rfind("synthetic:", 0) == 0 ? synthetic_checkpoint(o.in, o.arch) : load_checkpoint(o.in);
  if (!o.dtype.empty()) {
    const DType want = kTypes.at(o.dtype);
    for (auto& [name, t] : tensors) {
      const DType d = t.dtype();
      const bool floating =
          d == DType::F32 || d == DType::F16 || d == DType::BF16 || d == DType::F64;
      // Integer and bool tensors (indices, counters, masks) keep their exact values.
      if (floating && d != want) t = t.to(want);
    }
  }
  size_t bytes = 0;
  for (auto& [name, t] : tensors) bytes += t.nbytes();
  write_safetensors(o.out, tensors);
  std::printf("wrote %zu tensors, %zu bytes of tensor data to %s\n", tensors.size(), bytes,
              o.out.c_str());
  return 0;
}

}  // namespace

void add_convert(CLI::App& app) {
  auto o = std::make_shared<ConvertOptions>();
  CLI::App* sub = app.add_subcommand(
      "convert", "Rewrite a checkpoint (.pt or .safetensors) as safetensors, optionally in bf16");
  sub->add_option("input", o->in, "checkpoint (.pt, .pth or .safetensors) or synthetic:SEED")
      ->required();
  sub->add_option("--arch", o->arch, "architecture of synthetic weights")->capture_default_str();
  sub->add_option("output", o->out, "safetensors file to write")->required();
  sub->add_option("--dtype", o->dtype, "store floating-point tensors as this type")
      ->check(CLI::IsMember({"bf16", "f32", "f16"}));
  commands().push_back({sub, [o] { return run_convert(*o); }});
}

}  // namespace lingbot::cli
