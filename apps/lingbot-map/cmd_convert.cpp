#include <cstdio>
#include <map>
#include <memory>
#include <string>

#include "commands.h"
#include "lingbot/checkpoint.h"

namespace lingbot::cli {
namespace {

struct ConvertArgs {
  std::string in, out;
  ConvertOptions options;
};

int run_convert(const ConvertArgs& a) {
  const ConvertSummary s = convert_checkpoint(a.in, a.out, a.options);
  std::printf("wrote %zu tensors, %zu bytes of tensor data to %s\n", s.tensors, s.bytes,
              a.out.c_str());
  return 0;
}

}  // namespace

void add_convert(CLI::App& app) {
  auto o = std::make_shared<ConvertArgs>();
  CLI::App* sub = app.add_subcommand(
      "convert",
      "Rewrite a checkpoint as safetensors or .pt (by the output's extension), optionally in bf16");
  sub->add_option("input", o->in, "checkpoint (.pt, .pth or .safetensors) or synthetic:SEED")
      ->required();
  sub->add_option("--arch", o->options.arch, "architecture of synthetic weights")
      ->capture_default_str();
  sub->add_option("output", o->out,
                  "file to write: .pt or .pth as torch.save writes it, else safetensors")
      ->required();
  sub->add_option("--dtype", o->options.dtype, "store floating-point tensors as this type")
      ->check(CLI::IsMember({"bf16", "f32", "f16"}));
  commands().push_back({sub, [o] { return run_convert(*o); }});
}

}  // namespace lingbot::cli
