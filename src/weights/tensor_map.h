// A checkpoint as the engine sees it: tensor name -> tensor.
#pragma once

#include <map>
#include <string>

#include "lingbot/tensor.h"

namespace lingbot {

using TensorMap = std::map<std::string, Tensor>;

}  // namespace lingbot
