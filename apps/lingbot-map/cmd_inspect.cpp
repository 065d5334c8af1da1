#include <cstdio>
#include <memory>
#include <string>

#include "commands.h"
#include "weights/safetensors.h"

namespace lingbot::cli {

void add_inspect(CLI::App& app) {
  auto path = std::make_shared<std::string>();
  CLI::App* sub = app.add_subcommand("inspect", "Describe a checkpoint: tensors, dtypes, sizes");
  sub->add_option("model", *path, "checkpoint (.safetensors)")->required();
  commands().push_back({sub, [path] {
    SafetensorsFile f = read_safetensors(*path);
    size_t params = 0;
    for (auto& [name, t] : f.tensors) params += t.numel();
    std::printf("%zu tensors, %zu parameters\n", f.tensors.size(), params);
    return 0;
  }});
}

}  // namespace lingbot::cli
