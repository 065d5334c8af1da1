// The tiny fixture's 16 frames as model input: float [3, H, W] in [0, 1], used as they are
// (the fixture was made without resizing).
#pragma once

#include <vector>

#include "io/image.h"
#include "io/preprocess.h"
#include "lingbot/tensor.h"
#include "test_util.h"

namespace lingbot::test {

inline std::vector<Tensor> tiny_frames() {
  std::vector<Tensor> frames;
  for (const auto& path : list_images(fixtures_dir() + "/tiny/frames"))
    frames.push_back(to_float01(preprocess(load_image(path), PreprocessMode::None)));
  return frames;
}

}  // namespace lingbot::test
