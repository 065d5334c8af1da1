// Image files in and out: PNG and JPEG decoded to 8-bit RGB exactly the way the reference's
// Pillow pipeline sees them (spec/02 §6.1), so that preprocessing can match it bit for bit.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

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

// The *.png / *.jpg / *.jpeg files (any letter case) directly inside `dir`, full paths, in
// natural order ("2.png" before "10.png"). Throws Error if `dir` is missing or holds none.
std::vector<std::string> list_images(const std::string& dir);

// The ordering list_images uses: digit runs compare by numeric value, everything else bytewise.
bool natural_less(const std::string& a, const std::string& b);

}  // namespace lingbot
