// Model-input frames from decoded images, bit-identical to the reference's
// load_and_preprocess_images (spec/02 §6.2-6.5).
#pragma once

#include <cstdint>
#include <vector>

#include "io/image.h"
#include "lingbot/tensor.h"

namespace lingbot {

enum class PreprocessMode { Crop, Pad, None };

// Resampled size before cropping/padding (spec/02 §6.2). None keeps the image size.
struct Size2 {
  int width = 0, height = 0;
};
Size2 preprocess_resize_size(int width, int height, PreprocessMode mode, int target = 518,
                             int patch = 14);

// uint8 CHW [3, H, W]. Crop: width `target`, rows centre-cropped to at most `target`. Pad:
// longer side `target`, padded with white to target x target. None: unchanged, but both sides
// must be multiples of `patch`. Throws Error for sizes the reference cannot produce.
Tensor preprocess(const ImageU8& img, PreprocessMode mode, int target = 518, int patch = 14);

// F32 [3, H, W] (or any shape) in [0, 1]: (float)u / 255, as torchvision's ToTensor.
Tensor to_float01(const Tensor& chw_u8);

// Stacks [3, H, W] frames (all U8 or all F32) into [N, 3, Hmax, Wmax], centring the smaller
// ones on white (255 / 1.0) as the reference does for mixed sizes (spec/02 §6.5).
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
