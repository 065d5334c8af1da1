#include "model/config.h"

#include "lingbot/error.h"

namespace lingbot {

ModelConfig ModelConfig::preset(const std::string& name) {
  ModelConfig c;
  if (name == "lingbot-map") return c;
  if (name == "tiny") {  // the fixtures' narrow model
    c.arch = "tiny";
    c.dim = 128;
    c.heads = 2;
    c.dino_depth = 2;
    c.camera_heads = 4;
    c.dpt_features = 32;
    c.dpt_out = {32, 64, 128, 128};
    return c;
  }
  throw Error("unknown architecture '" + name + "' (expected lingbot-map or tiny)",
              ErrorKind::InvalidArgument);
}

ModelConfig ModelConfig::infer(const TensorMap& tensors) {
  auto it = tensors.find("aggregator.camera_token");
  if (it == tensors.end())
    throw Error("checkpoint has no aggregator.camera_token: not a LingBot-Map checkpoint");
  const int64_t dim = it->second.dim(-1);
  for (const char* name : {"lingbot-map", "tiny"}) {
    ModelConfig c = preset(name);
    if (c.dim == dim) return c;
  }
  throw Error("checkpoint width " + std::to_string(dim) +
              " matches no known architecture (lingbot-map: 1024, tiny: 128)");
}

}  // namespace lingbot
