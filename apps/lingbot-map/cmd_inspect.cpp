#include <cstdio>
#include <memory>
#include <string>

#include "commands.h"
#include "weights/checkpoint.h"

namespace lingbot::cli {
namespace {

int run_inspect(const std::string& path) {
  TensorMap tensors = load_checkpoint(path);
  size_t params = 0;
  for (auto& [name, t] : tensors) params += t.numel();
  std::printf("%zu tensors, %zu parameters\n", tensors.size(), params);
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
