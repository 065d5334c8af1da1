#include <cstdio>
#include <map>
#include <memory>
#include <string>

#include "commands.h"
#include "lingbot/error.h"
#include "model/config.h"
#include "weights/checkpoint.h"

namespace lingbot::cli {
namespace {

int run_inspect(const std::string& path) {
  TensorMap tensors = load_checkpoint(path);
  size_t params = 0, bytes = 0;
  std::map<std::string, size_t> by_dtype, by_part;  // parameters per dtype / top-level module
  for (auto& [name, t] : tensors) {
    params += t.numel();
    bytes += t.nbytes();
    by_dtype[dtype_name(t.dtype())] += t.numel();
    by_part[name.substr(0, name.find('.'))] += t.numel();
  }
  std::printf("%s: %zu tensors, %zu parameters, %.2f GB\n", path.c_str(), tensors.size(), params,
              bytes / 1e9);
  try {
    const ModelConfig c = ModelConfig::infer(tensors);
    std::printf("architecture: %s (width %lld, %lld block pairs, %lld heads, DINO depth %lld)\n",
                c.arch.c_str(), static_cast<long long>(c.dim), static_cast<long long>(c.depth),
                static_cast<long long>(c.heads), static_cast<long long>(c.dino_depth));
  } catch (const Error& e) {
    std::printf("architecture: unknown (%s)\n", e.what());
  }
  for (auto& [d, n] : by_dtype) std::printf("  dtype %-5s %zu parameters\n", d.c_str(), n);
  for (auto& [m, n] : by_part) std::printf("  %-12s %zu parameters\n", m.c_str(), n);
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
