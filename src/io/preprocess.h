// Model-input frames from decoded images, bit-identical to the reference's
// load_and_preprocess_images. preprocess() and to_float01() are public
// (lingbot/image.h); the resampling pieces below are for the tests.
#pragma once

#include <cstdint>
#include <vector>

#include "lingbot/image.h"
#include "lingbot/tensor.h"

namespace lingbot {

// Resampled size before cropping/padding. None keeps the image size.
struct Size2 {
  int width = 0, height = 0;
};
Size2 preprocess_resize_size(int width, int height, PreprocessMode mode, int target = 518,
                             int patch = 14);

// Stacks [3, H, W] frames (all U8 or all F32) into [N, 3, Hmax, Wmax], centring the smaller
// ones on white (255 / 1.0) as the reference does for mixed sizes.
Tensor pad_batch_to_common_size(const std::vector<Tensor>& frames);

// Pillow's antialiased BICUBIC resize of 8-bit RGB (two passes, uint8 in between).
ImageU8 resize_bicubic(const ImageU8& img, int width, int height);

// The fixed-point filter of one axis: output i reads `count[i]` inputs from `first[i]` on, with
// weights `k[i * ksize + m]` in units of 2^-22.
struct ResampleWeights {
  int ksize = 0;
  std::vector<int> first, count;
  std::vector<int32_t> k;
};
ResampleWeights bicubic_weights(int in_size, int out_size);

}  // namespace lingbot
