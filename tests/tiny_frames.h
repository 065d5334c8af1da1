// The tiny fixture's 16 frames as model input: float [3, H, W] in [0, 1], used as they are
// (the fixture was made without resizing).
#pragma once

#include <cstring>
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

// frames[begin, end) as one [S, 3, H, W] float batch, as a model call takes them.
inline Tensor stack_frames(const std::vector<Tensor>& frames, size_t begin, size_t end) {
  const Tensor& f0 = frames[begin];
  Tensor out = Tensor::zeros({static_cast<int64_t>(end - begin), 3, f0.dim(1), f0.dim(2)});
  for (size_t i = begin; i < end; ++i)
    std::memcpy(out.f32() + (i - begin) * f0.numel(), frames[i].f32(), f0.nbytes());
  return out;
}

}  // namespace lingbot::test
