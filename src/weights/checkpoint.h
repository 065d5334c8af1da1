// One entry point for every checkpoint format the engine reads, chosen by the file's first bytes.
#pragma once

#include <string>

#include "weights/tensor_map.h"

namespace lingbot {

// safetensors, or a torch.save file (zip or legacy); a {'model': ...} wrapper is unwrapped.
// Tensors are views into a memory mapping where possible.
TensorMap load_checkpoint(const std::string& path);

}  // namespace lingbot
