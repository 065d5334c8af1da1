// libFuzzer target: arbitrary bytes through the PNG/JPEG decoders and, for decodable inputs of
// a sane shape, through preprocessing; and through the 16-bit greyscale PNG reader that depth
// maps take (eval). Anything but a clean lingbot::Error is a finding.
#include <cstdint>
#include <cstdlib>

#include "io/image.h"
#include "io/image_codec.h"
#include "io/preprocess.h"
#include "lingbot/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace lingbot;
  // Small enough that a lying header cannot make one input take seconds or gigabytes.
  constexpr size_t kMaxPixels = size_t(1) << 22;
  try {
    const ImageU8 img = decode_image(data, size, "fuzz input", kMaxPixels);
    if (img.width <= 0 || img.height <= 0 ||
        img.rgb.size() != size_t(img.width) * size_t(img.height) * 3)
      std::abort();
    // Resizing is the same arithmetic for every image, so only small ones pay for it (sanitized
    // code is slow); extreme aspect ratios would only grow the output.
    const int lo = img.width < img.height ? img.width : img.height;
    const int hi = img.width < img.height ? img.height : img.width;
    if (size_t(img.width) * img.height <= 32768 && hi <= 64 * lo) {
      for (PreprocessMode mode : {PreprocessMode::Crop, PreprocessMode::Pad}) {
        const Tensor t = preprocess(img, mode, 56, 14);
        if (t.dim(0) != 3 || t.dim(2) % 14 != 0) std::abort();
      }
    }
  } catch (const Error&) {
  }
  try {
    const codec::GrayU16 depth = codec::decode_png_gray16(data, size, "fuzz input", kMaxPixels);
    if (depth.width <= 0 || depth.height <= 0 ||
        depth.values.size() != size_t(depth.width) * size_t(depth.height))
      std::abort();
  } catch (const Error&) {
  }
  return 0;
}
