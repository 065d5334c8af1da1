// Public API: checkpoints as files, without building an engine: what one holds, and rewriting one
// (.pt or .safetensors, or synthetic weights) as safetensors or as a torch.save .pt file.
//
//   lingbot::CheckpointSummary s = lingbot::inspect_checkpoint("lingbot-map.pt");
//   lingbot::convert_checkpoint("lingbot-map.pt", "lingbot-map.safetensors", {.dtype = "bf16"});
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>

namespace lingbot {

struct CheckpointSummary {
  size_t tensors = 0, parameters = 0, bytes = 0;
  std::map<std::string, size_t> parameters_by_dtype;  // "BF16" -> parameters
  std::map<std::string, size_t>
      parameters_by_module;  // top-level name ("aggregator") -> parameters
  // The architecture its shapes describe; arch is empty and arch_error says why when they fit
  // none.
  std::string arch, arch_error;
  int64_t dim = 0, depth = 0, heads = 0, dino_depth = 0;
};

// Throws Error when `path` is not a readable checkpoint (.safetensors, .pt or .pth).
CheckpointSummary inspect_checkpoint(const std::string& path);

struct ConvertOptions {
  std::string dtype;  // "bf16", "f16", "f32": floating-point tensors stored so; "" keeps
  std::string arch = "lingbot-map";  // architecture of synthetic weights
};

struct ConvertSummary {
  size_t tensors = 0, bytes = 0;  // bytes of tensor data written
};

// `input`: a checkpoint, or "synthetic:SEED" (the weights Engine::create makes for that seed).
// `output` ending in .pt or .pth is written as torch.save writes it (torch.load reads it),
// anything else as safetensors. Integer and bool tensors keep their values whatever the dtype.
// Throws Error.
ConvertSummary convert_checkpoint(const std::string& input, const std::string& output,
                                  const ConvertOptions& options = {});

}  // namespace lingbot
