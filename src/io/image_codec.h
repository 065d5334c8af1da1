// What the image decoders share; the entry points are public (lingbot/image.h). Decoding follows
// what Pillow does for the reference, not what a viewer would do: no gamma or colour
// management, Pillow's conversions for every PNG colour type, and libjpeg-turbo with its default
// (ISLOW, fancy upsampling) settings.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "lingbot/image.h"

namespace lingbot::codec {

// Throws Error "<what>: <why>".
[[noreturn]] void fail(const std::string& what, const std::string& why);
// Refuses an image with no pixels or more than `max_pixels`, before its memory is allocated.
void check_size(const std::string& what, uint64_t w, uint64_t h, size_t max_pixels);

// One decoder per format (png.cpp, jpeg.cpp), orientation applied.
ImageU8 decode_png(const uint8_t* data, size_t size, const std::string& what, size_t max_pixels);
ImageU8 decode_jpeg(const uint8_t* data, size_t size, const std::string& what, size_t max_pixels);

// A 16-bit greyscale PNG's samples as they are (depth maps: no conversion, no orientation), with
// decode_png's guards. Any other PNG is refused with its bit depth and colour type.
struct GrayU16 {
  int width = 0, height = 0;
  std::vector<uint16_t> values;  // row-major, no padding
};
GrayU16 decode_png_gray16(const uint8_t* data, size_t size, const std::string& what,
                          size_t max_pixels);

// Baseline JPEG of an 8-bit RGB image (libjpeg's defaults at `quality`, 4:2:0); for messages
// that carry pictures (the MCAP export's /lingbot/image). Throws Error on failure.
std::vector<uint8_t> encode_jpeg(const ImageU8& img, int quality);
// The bytes of a PNG up to the first chunk whose declared data runs past the end (all of them
// when every chunk fits, or after IEND): what decode_png hands libpng.
size_t png_bytes_that_fit(const uint8_t* data, size_t size);

// EXIF orientation (image_orientation.cpp), from a format's EXIF block and XMP packet.
int resolve_orientation(const std::vector<uint8_t>& exif, const std::vector<char>& xmp);
ImageU8 apply_orientation(ImageU8 img, int orientation);

}  // namespace lingbot::codec
