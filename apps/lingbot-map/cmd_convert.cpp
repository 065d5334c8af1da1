#include <cstdio>
#include <map>
#include <memory>
#include <string>

#include "commands.h"
#include "weights/checkpoint.h"
#include "weights/safetensors.h"

namespace lingbot::cli {
namespace {

struct ConvertOptions {
  std::string in, out, dtype;
};

int run_convert(const ConvertOptions& o) {
  static const std::map<std::string, DType> kTypes = {
      {"bf16", DType::BF16}, {"f32", DType::F32}, {"f16", DType::F16}};
  TensorMap tensors = load_checkpoint(o.in);
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
  sub->add_option("input", o->in, "checkpoint (.pt, .pth or .safetensors)")->required();
  sub->add_option("output", o->out, "safetensors file to write")->required();
  sub->add_option("--dtype", o->dtype, "store floating-point tensors as this type")
      ->check(CLI::IsMember({"bf16", "f32", "f16"}));
  commands().push_back({sub, [o] { return run_convert(*o); }});
}

}  // namespace lingbot::cli
