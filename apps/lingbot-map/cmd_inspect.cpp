#include <cstdio>
#include <map>
#include <memory>
#include <string>

#include "commands.h"
#include "lingbot/checkpoint.h"

namespace lingbot::cli {
namespace {

int run_inspect(const std::string& path) {
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
  CLI::App* sub = app.add_subcommand("inspect", "Describe a checkpoint: tensors, dtypes, sizes");
  sub->add_option("model", *path, "checkpoint (.safetensors, .pt or .pth)")->required();
  commands().push_back({sub, [path] { return run_inspect(*path); }});
}

}  // namespace lingbot::cli
