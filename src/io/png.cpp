// PNG in (Pillow's conversions for every colour type, EXIF and XMP from its chunks) and out.
//
// libpng and libjpeg report fatal errors through a callback that must not return. We leave it
// with longjmp back into small functions that own nothing with a destructor, and turn the
// recorded message into an Error once we are back in ordinary C++ code.
#include <png.h>

#include <algorithm>
#include <cerrno>
#include <csetjmp>
#include <cstdio>
#include <cstring>

#include "io/image_codec.h"
#include "lingbot/error.h"

namespace lingbot {
namespace codec {
namespace {

// Pillow's alpha_composite of an RGBA image over opaque white, in its 7-bit fixed point.
uint8_t over_white(uint32_t c, uint32_t a) {
  if (a == 0) return 255;
  const uint32_t t = 128 * (c * a + 255 * (255 - a)) + 16384;
  return uint8_t((((t >> 8) + t) >> 8) >> 7);
}

// ---------------------------------------------------------------------------------------------
// PNG

struct PngSource {
  jmp_buf jump;
  char message[256];
  const uint8_t* data;
  size_t size, pos;
  bool truncated;
};

void png_on_error(png_structp png, png_const_charp msg) {
  auto* src = static_cast<PngSource*>(png_get_error_ptr(png));
  std::snprintf(src->message, sizeof src->message, "%s", msg);
  longjmp(src->jump, 1);
}
void png_on_warning(png_structp, png_const_charp) {}

void png_on_read(png_structp png, png_bytep out, size_t n) {
  auto* src = static_cast<PngSource*>(png_get_io_ptr(png));
  if (n > src->size - src->pos) {
    src->truncated = true;
    png_error(png, "file ends early");
  }
  std::memcpy(out, src->data + src->pos, n);
  src->pos += n;
}

}  // namespace

// libpng allocates a chunk's declared length before it reads the data, and its limit on that
// (user_chunk_malloc_max) is only a warning on read: a few bytes claiming a 2 GB text chunk
// would get 2 GB. No chunk can hold more than the file does, so libpng only sees the bytes up to
// the first chunk whose data would run past the end: it then stops at that chunk's header with
// the same "ends early" error, before allocating anything.
size_t png_bytes_that_fit(const uint8_t* data, size_t size) {
  size_t p = 8;  // the signature
  while (size >= 8 && p <= size - 8) {
    const size_t len = png_get_uint_32(data + p);
    // A header libpng refuses by itself (a length past 2^31 - 1, a type that is not four
    // letters) keeps its own error; only a well-formed chunk that runs past the end is cut.
    const auto letter = [](uint8_t c) { return (c | 0x20) >= 'a' && (c | 0x20) <= 'z'; };
    if (len > 0x7fffffff || !std::all_of(data + p + 4, data + p + 8, letter)) break;
    if (len > size - p - 8) return p;
    if (std::memcmp(data + p + 4, "IEND", 4) == 0) break;
    p += 12 + len;
  }
  return size;
}

namespace {

struct PngHeader {
  png_uint_32 width, height;
  int bit_depth, color_type, interlace;
};

bool png_read_header(png_structp png, png_infop info, PngHeader* h) {
  auto* src = static_cast<PngSource*>(png_get_error_ptr(png));
  if (setjmp(src->jump)) return false;
  png_read_info(png, info);
  png_get_IHDR(png, info, &h->width, &h->height, &h->bit_depth, &h->color_type, &h->interlace,
               nullptr, nullptr);
  return true;
}

// Separate from reading the header because libpng allocates its row buffers here, which must
// wait until the size has been checked.
bool png_start_rows(png_structp png, png_infop info, const PngHeader& h) {
  auto* src = static_cast<PngSource*>(png_get_error_ptr(png));
  if (setjmp(src->jump)) return false;
  // Only sub-byte samples are unpacked (to one byte each, unscaled); every conversion to RGB
  // is ours, so that each colour type ends up with the values Pillow gives it.
  if (h.bit_depth < 8) png_set_packing(png);
  if (h.interlace != PNG_INTERLACE_NONE) png_set_interlace_handling(png);
  png_read_update_info(png, info);
  return true;
}

// A non-interlaced image is read `height` rows at a time into rows[0] (the caller converts each
// before the next); an interlaced one needs all of its rows at once, one pointer per row.
bool png_read_rows(png_structp png, png_bytepp rows, png_uint_32 height, bool interlaced) {
  auto* src = static_cast<PngSource*>(png_get_error_ptr(png));
  if (setjmp(src->jump)) return false;
  if (interlaced)
    png_read_image(png, rows);
  else
    for (png_uint_32 y = 0; y < height; ++y) png_read_row(png, rows[0], nullptr);
  return true;
}

// Chunks after the image data (an eXIf can live there). Pillow ignores damage past the pixels.
bool png_read_trailer(png_structp png, png_infop info) {
  auto* src = static_cast<PngSource*>(png_get_error_ptr(png));
  if (setjmp(src->jump)) return false;
  png_read_end(png, info);
  return true;
}

// The metadata Pillow's getexif() reads from a PNG: the eXIf chunk, else the hex dump that
// ImageMagick stores in a "Raw profile type exif" text chunk; and the XMP packet of an
// "XML:com.adobe.xmp" text chunk.
struct PngMeta {
  std::vector<uint8_t> exif;
  std::vector<char> xmp;
};

std::vector<uint8_t> decode_raw_profile(const char* s, size_t len) {
  // The dump starts after the profile's third line break (blank, name, length, hex lines).
  size_t p = 0;
  for (int lines = 0; lines < 3 && p < len; ++p)
    if (s[p] == '\n') ++lines;
  std::vector<uint8_t> out;
  int hi = -1;
  for (; p < len; ++p) {
    const char c = s[p];
    // Pillow joins the lines before fromhex, so a line break may even split a byte; other
    // whitespace is only allowed between bytes. Anything invalid means no EXIF.
    if (c == '\n') continue;
    if (c == ' ' || c == '\t' || c == '\r' || c == '\f' || c == '\v') {
      if (hi >= 0) return {};
      continue;
    }
    const int v = c >= '0' && c <= '9'   ? c - '0'
                  : c >= 'a' && c <= 'f' ? c - 'a' + 10
                  : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                         : -1;
    if (v < 0) return {};
    if (hi < 0) {
      hi = v;
    } else {
      out.push_back(uint8_t(hi << 4 | v));
      hi = -1;
    }
  }
  return hi < 0 ? out : std::vector<uint8_t>{};
}

PngMeta png_meta(png_structp png, png_infop info) {
  PngMeta meta;
  png_uint_32 n = 0;
  png_bytep data = nullptr;
  const bool has_exif = png_get_eXIf_1(png, info, &n, &data) && data && n;
  if (has_exif) meta.exif.assign(data, data + n);
  png_textp text = nullptr;
  int count = 0;
  png_get_text(png, info, &text, &count);
  for (int i = 0; i < count; ++i) {
    const png_text& t = text[i];
    if (!t.key || !t.text) continue;
    const size_t len = t.compression >= PNG_ITXT_COMPRESSION_NONE ? t.itxt_length : t.text_length;
    // Later chunks overwrite earlier ones in Pillow's info dict.
    if (!has_exif && std::strcmp(t.key, "Raw profile type exif") == 0)
      meta.exif = decode_raw_profile(t.text, len);
    else if (std::strcmp(t.key, "XML:com.adobe.xmp") == 0)
      meta.xmp.assign(t.text, t.text + len);
  }
  return meta;
}

// One PNG row of raw samples to RGB, with the conversion Pillow applies to the mode it opens
// that colour type as.
void png_row_to_rgb(const uint8_t* in, uint8_t* out, int w, const PngHeader& h,
                    const uint8_t (*palette)[3]) {
  const bool wide = h.bit_depth == 16;
  switch (h.color_type) {
    case PNG_COLOR_TYPE_GRAY:
      if (wide) {
        // Mode I;16: conversion to RGB saturates at 255 instead of scaling.
        for (int x = 0; x < w; ++x, out += 3) {
          const unsigned v = unsigned(in[2 * x]) << 8 | in[2 * x + 1];
          out[0] = out[1] = out[2] = uint8_t(std::min(v, 255u));
        }
      } else {
        // 1/2/4-bit grey are stretched to 0..255 (modes 1 and L;2/L;4).
        const int scale = h.bit_depth == 1   ? 255
                          : h.bit_depth == 2 ? 85
                          : h.bit_depth == 4 ? 17
                                             : 1;
        for (int x = 0; x < w; ++x, out += 3) out[0] = out[1] = out[2] = uint8_t(in[x] * scale);
      }
      break;
    case PNG_COLOR_TYPE_GRAY_ALPHA: {
      // Mode LA: alpha is dropped, not composited; 16-bit keeps the high byte.
      const int step = wide ? 4 : 2;
      for (int x = 0; x < w; ++x, out += 3) out[0] = out[1] = out[2] = in[x * step];
      break;
    }
    case PNG_COLOR_TYPE_PALETTE:
      for (int x = 0; x < w; ++x, out += 3) {
        const uint8_t* c = palette[in[x]];
        out[0] = c[0], out[1] = c[1], out[2] = c[2];
      }
      break;
    case PNG_COLOR_TYPE_RGB: {
      const int step = wide ? 2 : 1;
      for (int x = 0; x < 3 * w; ++x) out[x] = in[x * step];
      break;
    }
    case PNG_COLOR_TYPE_RGB_ALPHA: {
      // Mode RGBA is the one case the reference composites over white.
      const int step = wide ? 2 : 1;
      for (int x = 0; x < w; ++x, out += 3, in += 4 * step) {
        const uint8_t a = in[3 * step];
        for (int c = 0; c < 3; ++c) out[c] = over_white(in[c * step], a);
      }
      break;
    }
  }
}

// One libpng read of a PNG in memory, shared by both decoders: libpng sees only the chunks that
// fit (png_bytes_that_fit), its errors come back as messages, and its size limits are ours.
class PngReader {
 public:
  PngReader(const uint8_t* data, size_t size) {
    src_.data = data;
    src_.size = png_bytes_that_fit(data, size);
    png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &src_, png_on_error, png_on_warning);
    info = png ? png_create_info_struct(png) : nullptr;
    if (!info) {
      png_destroy_read_struct(&png, nullptr, nullptr);
      throw std::bad_alloc();
    }
    png_set_read_fn(png, &src_, png_on_read);
#ifdef FUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION
    // Checksums would reject nearly every mutation before it reaches the interesting code.
    png_set_crc_action(png, PNG_CRC_QUIET_USE, PNG_CRC_QUIET_USE);
    png_set_option(png, PNG_IGNORE_ADLER32, PNG_OPTION_ON);
#endif
    // libpng's default cap of 1,000,000 pixels per side would refuse images Pillow opens; the
    // pixel-count check (check_size) guards memory instead.
    png_set_user_limits(png, 0x7fffffff, 0x7fffffff);
  }
  ~PngReader() {
    png_destroy_read_struct(&png, &info, nullptr);
  }
  PngReader(const PngReader&) = delete;
  PngReader& operator=(const PngReader&) = delete;

  // Why libpng stopped, for the error message.
  std::string broken() const {
    if (src_.truncated) return "the PNG data ends early (truncated file?)";
    return std::string("not a valid PNG file (") + src_.message + ")";
  }

  png_structp png = nullptr;
  png_infop info = nullptr;

 private:
  PngSource src_{};  // libpng holds its address: the reader is neither copied nor moved
};

}  // namespace

ImageU8 decode_png(const uint8_t* data, size_t size, const std::string& what, size_t max_pixels) {
  PngReader reader(data, size);
  png_structp png = reader.png;
  png_infop info = reader.info;
  auto broken = [&] { return reader.broken(); };

  PngHeader h{};
  if (!png_read_header(png, info, &h)) fail(what, broken());
  check_size(what, h.width, h.height, max_pixels);
  if (!png_start_rows(png, info, h)) fail(what, broken());

  uint8_t palette[256][3];
  if (h.color_type == PNG_COLOR_TYPE_PALETTE) {
    // Pillow's palettes start as a grey ramp, so an index past PLTE's end reads as grey.
    for (int i = 0; i < 256; ++i) palette[i][0] = palette[i][1] = palette[i][2] = uint8_t(i);
    png_colorp plte = nullptr;
    int n = 0;
    if (png_get_PLTE(png, info, &plte, &n) && plte)
      for (int i = 0; i < std::min(n, 256); ++i)
        palette[i][0] = plte[i].red, palette[i][1] = plte[i].green, palette[i][2] = plte[i].blue;
  }

  const size_t row_bytes = png_get_rowbytes(png, info);
  const bool interlaced = h.interlace != PNG_INTERLACE_NONE;
  ImageU8 img;
  img.width = int(h.width);
  img.height = int(h.height);
  const size_t out_row = size_t(h.width) * 3;
  std::vector<uint8_t> raw(row_bytes * (interlaced ? h.height : 1));
  std::vector<png_bytep> rows(interlaced ? h.height : 1);
  for (size_t y = 0; y < rows.size(); ++y) rows[y] = raw.data() + y * row_bytes;

  if (interlaced) {
    if (!png_read_rows(png, rows.data(), h.height, true)) fail(what, broken());
    img.rgb.resize(out_row * h.height);
    for (png_uint_32 y = 0; y < h.height; ++y)
      png_row_to_rgb(rows[y], &img.rgb[y * out_row], img.width, h, palette);
  } else {
    // Growing row by row means a tiny file that claims a huge size fails before the memory
    // is ever touched.
    img.rgb.reserve(out_row * h.height);
    for (png_uint_32 y = 0; y < h.height; ++y) {
      if (!png_read_rows(png, rows.data(), 1, false)) fail(what, broken());
      img.rgb.resize(out_row * (y + 1));
      png_row_to_rgb(rows[0], &img.rgb[y * out_row], img.width, h, palette);
    }
  }

  // An eXIf after the pixels outranks a text-chunk profile before them, as in Pillow; damage
  // in the trailer just leaves what was read before it.
  png_read_trailer(png, info);
  const PngMeta meta = png_meta(png, info);
  return apply_orientation(std::move(img), resolve_orientation(meta.exif, meta.xmp));
}

GrayU16 decode_png_gray16(const uint8_t* data, size_t size, const std::string& what,
                          size_t max_pixels) {
  if (size < 8 || png_sig_cmp(data, 0, 8) != 0)
    throw Error(what + " is not a PNG file", ErrorKind::InvalidArgument);
  PngReader reader(data, size);
  PngHeader h{};
  if (!png_read_header(reader.png, reader.info, &h)) fail(what, reader.broken());
  if (h.bit_depth != 16 || h.color_type != PNG_COLOR_TYPE_GRAY)
    throw Error(what + " is not a 16-bit greyscale PNG (bit depth " + std::to_string(h.bit_depth) +
                    ", colour type " + std::to_string(h.color_type) + ")",
                ErrorKind::InvalidArgument);
  check_size(what, h.width, h.height, max_pixels);
  if (!png_start_rows(reader.png, reader.info, h)) fail(what, reader.broken());

  const size_t row_bytes = size_t(h.width) * 2;
  const bool interlaced = h.interlace != PNG_INTERLACE_NONE;
  std::vector<uint8_t> raw(row_bytes * (interlaced ? h.height : 1));
  std::vector<png_bytep> rows(interlaced ? h.height : 1);
  for (size_t y = 0; y < rows.size(); ++y) rows[y] = raw.data() + y * row_bytes;
  GrayU16 img;
  img.width = int(h.width);
  img.height = int(h.height);
  // Big-endian samples as PNG stores them; no orientation: a depth map is stored as computed.
  const auto append = [&](const uint8_t* row) {
    for (png_uint_32 x = 0; x < h.width; ++x)
      img.values.push_back(uint16_t(unsigned(row[2 * x]) << 8 | row[2 * x + 1]));
  };
  if (interlaced) {
    if (!png_read_rows(reader.png, rows.data(), h.height, true)) fail(what, reader.broken());
    img.values.reserve(size_t(h.width) * h.height);
    for (png_uint_32 y = 0; y < h.height; ++y) append(rows[y]);
  } else {
    // Row by row, as decode_png: a tiny file claiming a huge size fails before its memory grows.
    for (png_uint_32 y = 0; y < h.height; ++y) {
      if (!png_read_rows(reader.png, rows.data(), 1, false)) fail(what, reader.broken());
      append(rows[0]);
    }
  }
  return img;
}

}  // namespace codec

// ---------------------------------------------------------------------------------------------
// Writing

namespace {

struct PngSink {
  jmp_buf jump;
  char message[256];
};

void png_sink_error(png_structp png, png_const_charp msg) {
  auto* sink = static_cast<PngSink*>(png_get_error_ptr(png));
  std::snprintf(sink->message, sizeof sink->message, "%s", msg);
  longjmp(sink->jump, 1);
}

bool png_write_all(png_structp png, png_infop info, FILE* f, int w, int h, int bit_depth,
                   int color_type, png_bytepp rows) {
  auto* sink = static_cast<PngSink*>(png_get_error_ptr(png));
  if (setjmp(sink->jump)) return false;
  png_init_io(png, f);
  png_set_IHDR(png, info, png_uint_32(w), png_uint_32(h), bit_depth, color_type, PNG_INTERLACE_NONE,
               PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
  // Outputs are written while the video streams: the fastest deflate level with one cheap
  // filter (the left neighbour, which suits smooth depth maps and photographs) costs a few
  // percent of size against zlib's default and its per-row filter search, at a fraction of
  // the time.
  png_set_compression_level(png, 1);
  png_set_filter(png, PNG_FILTER_TYPE_BASE, PNG_FILTER_SUB);
  png_write_info(png, info);
  png_write_image(png, rows);
  png_write_end(png, nullptr);
  return true;
}

// `rows` are big-endian samples already laid out as PNG wants them.
void write_png_rows(const std::string& path, int w, int h, int bit_depth, int color_type,
                    std::vector<png_bytep>& rows) {
  if (w <= 0 || h <= 0) throw Error("cannot write " + path + ": the image is empty");
  const std::string tmp = path + ".partial";
  FILE* f = std::fopen(tmp.c_str(), "wb");
  if (!f) throw Error("cannot write " + path + ": " + std::strerror(errno));
  PngSink sink{};
  png_structp png =
      png_create_write_struct(PNG_LIBPNG_VER_STRING, &sink, png_sink_error, codec::png_on_warning);
  png_infop info = png ? png_create_info_struct(png) : nullptr;
  bool ok = info && png_write_all(png, info, f, w, h, bit_depth, color_type, rows.data());
  png_destroy_write_struct(&png, &info);
  ok = std::fclose(f) == 0 && ok;
  if (!ok || std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    throw Error("cannot write " + path + " (" +
                (sink.message[0] ? sink.message : "disk full or not writable?") + ")");
  }
}

}  // namespace

void write_png(const std::string& path, const ImageU8& img) {
  LINGBOT_CHECK(img.rgb.size() == size_t(img.width) * img.height * 3,
                "cannot write " + path + ": the pixel buffer does not match the image size");
  std::vector<png_bytep> rows(img.height);
  for (int y = 0; y < img.height; ++y)
    rows[y] = const_cast<png_bytep>(img.rgb.data() + size_t(y) * img.width * 3);
  write_png_rows(path, img.width, img.height, 8, PNG_COLOR_TYPE_RGB, rows);
}

void write_png_gray16(const std::string& path, int w, int h, const uint16_t* data) {
  if (w <= 0 || h <= 0) throw Error("cannot write " + path + ": the image is empty");
  std::vector<uint8_t> be(size_t(w) * h * 2);
  for (size_t i = 0; i < size_t(w) * h; ++i) {
    be[2 * i] = uint8_t(data[i] >> 8);
    be[2 * i + 1] = uint8_t(data[i]);
  }
  std::vector<png_bytep> rows(h);
  for (int y = 0; y < h; ++y) rows[y] = be.data() + size_t(y) * w * 2;
  write_png_rows(path, w, h, 16, PNG_COLOR_TYPE_GRAY, rows);
}

}  // namespace lingbot
