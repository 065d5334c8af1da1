// Reading an image file: the format by its magic bytes, then that format's decoder.
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "io/image_codec.h"
#include "lingbot/error.h"

namespace lingbot {
namespace codec {

void fail(const std::string& what, const std::string& why) {
  throw Error(what + ": " + why);
}

void check_size(const std::string& what, uint64_t w, uint64_t h, size_t max_pixels) {
  if (w == 0 || h == 0)
    fail(what, "the image has no pixels (" + std::to_string(w) + "x" + std::to_string(h) + ")");
  if (w * h > max_pixels)
    fail(what, "the image is " + std::to_string(w) + "x" + std::to_string(h) +
                   " pixels, more than the limit of " + std::to_string(max_pixels));
}

}  // namespace codec

using codec::fail;
namespace fs = std::filesystem;

ImageU8 decode_image(const uint8_t* data, size_t size, const std::string& what, size_t max_pixels) {
  static const uint8_t kPng[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  if (size == 0) fail(what, "the file is empty");
  if (size < 8 && std::memcmp(data, kPng, size) == 0)
    fail(what, "the PNG data ends early (truncated file?)");
  if (size >= 8 && std::memcmp(data, kPng, 8) == 0)
    return codec::decode_png(data, size, what, max_pixels);
  static const uint8_t kJpeg[3] = {0xff, 0xd8, 0xff};
  if (size < 3 && std::memcmp(data, kJpeg, size) == 0)
    fail(what, "the JPEG data ends early (truncated file?)");
  if (size >= 3 && std::memcmp(data, kJpeg, 3) == 0)
    return codec::decode_jpeg(data, size, what, max_pixels);
  fail(what, "unsupported image format (only PNG and JPEG can be read)");
}

ImageU8 load_image(const std::string& path) {
  std::error_code ec;
  if (!fs::exists(path, ec)) throw Error(path + ": no such file", ErrorKind::NotFound);
  if (fs::is_directory(path, ec))
    throw Error(path + ": is a folder, not an image file", ErrorKind::InvalidArgument);
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(path, std::string("cannot open the file (") + std::strerror(errno) + ")");
  std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)),
                             std::istreambuf_iterator<char>());
  if (in.bad()) fail(path, "reading the file failed");
  return decode_image(bytes.data(), bytes.size(), path);
}

ImageU8 rotate_clockwise_90(const ImageU8& img) {
  return codec::apply_orientation(img, 6);  // EXIF 6: the picture turned a quarter clockwise
}

}  // namespace lingbot
