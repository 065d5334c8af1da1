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

void resolve_precision(const std::string& precision, bool cuda, bool reads_fp8_kv,
                       ModelConfig& config) {
  if (precision != "auto" && precision != "f32" && precision != "bf16" && precision != "fp8")
    throw Error("unknown precision '" + precision + "' (auto, f32, bf16 or fp8)",
                ErrorKind::InvalidArgument);
  if (precision == "bf16" && !cuda)
    throw Error("bf16 precision needs the cuda device (the CPU runs f32)",
                ErrorKind::InvalidArgument);
  if (precision == "fp8" && !reads_fp8_kv)
    throw Error("fp8 precision needs the CPU or a GPU of compute capability 8.0 or newer",
                ErrorKind::InvalidArgument);
  config.compute = precision == "bf16" || (precision != "f32" && cuda) ? DType::BF16 : DType::F32;
  // On the GPU the e4m3 cache is as fast as bf16 and within the bf16 engine's tolerances
  // (docs/PERFORMANCE.md), at half the bytes.
  config.kv_fp8 = precision == "fp8" || (precision == "auto" && cuda && reads_fp8_kv);
}

}  // namespace lingbot
