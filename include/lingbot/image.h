// Public API: image files in and out, and the reference's preprocessing into model-input frames.
//
//   for (const std::string& path : lingbot::list_images("frames/")) {
//     lingbot::ImageU8 img = lingbot::load_image(path);
//     lingbot::Tensor frame = lingbot::model_input(img, lingbot::PreprocessMode::Crop, 518);
//     session->push(frame, on_result);
//   }
//
// PNG and JPEG are decoded to 8-bit RGB exactly the way the reference's Pillow pipeline sees
// them, and preprocessing matches its load_and_preprocess_images bit for bit
//.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "lingbot/tensor.h"

namespace lingbot {

struct ImageU8 {
  int width = 0, height = 0;
  std::vector<uint8_t> rgb;  // HWC, RGB, row-major, no padding
};

// Pillow refuses images above twice its MAX_IMAGE_PIXELS as decompression bombs; so do we.
inline constexpr size_t kMaxImagePixels = 2 * 89478485;

// PNG or JPEG, chosen by the magic bytes; EXIF orientation applied, alpha handled as Pillow's
// RGBA path does, any colour type converted to RGB. Throws Error naming `path` on any failure.
ImageU8 load_image(const std::string& path);

// The same from memory; `what` names the source in error messages. Images with more than
// `max_pixels` pixels are refused before anything large is allocated.
ImageU8 decode_image(const uint8_t* data, size_t size, const std::string& what,
                     size_t max_pixels = kMaxImagePixels);

// 8-bit RGB PNG; the file is complete or absent afterwards.
void write_png(const std::string& path, const ImageU8& img);
// 16-bit greyscale PNG (e.g. depth maps); `data` is h*w values, row-major.
void write_png_gray16(const std::string& path, int w, int h, const uint16_t* data);

// The picture turned a quarter turn clockwise (W x H becomes H x W), losslessly: the reference
// demo's --rotate_clockwise_90, which turns the decoded pictures before preprocessing.
ImageU8 rotate_clockwise_90(const ImageU8& img);

// The *.png / *.jpg / *.jpeg files (any letter case) directly inside `dir`, full paths, in
// natural order ("2.png" before "10.png"). Throws Error if `dir` is missing or holds none.
std::vector<std::string> list_images(const std::string& dir);

// The ordering list_images uses: digit runs compare by numeric value, everything else bytewise.
bool natural_less(const std::string& a, const std::string& b);

enum class PreprocessMode { Crop, Pad, None };

// uint8 CHW [3, H, W]. Crop: width `target`, rows centre-cropped to at most `target`. Pad:
// longer side `target`, padded with white to target x target. None: unchanged, but both sides
// must be multiples of `patch`. Throws Error for sizes the reference cannot produce.
Tensor preprocess(const ImageU8& img, PreprocessMode mode, int target = 518, int patch = 14);

// F32 [3, H, W] (or any shape) in [0, 1]: (float)u / 255, as torchvision's ToTensor.
Tensor to_float01(const Tensor& chw_u8);

// The model-input frame of a picture: preprocess, then to_float01.
inline Tensor model_input(const ImageU8& img, PreprocessMode mode, int target = 518) {
  return to_float01(preprocess(img, mode, target));
}

// F32 [3, H, W] in [0, 1] from 8-bit RGB as is (no resizing): u / 255.
Tensor to_tensor(const ImageU8& img);

}  // namespace lingbot
