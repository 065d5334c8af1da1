// Decoding follows what Pillow does for the reference, not what a viewer would
// do: no gamma or colour management, Pillow's conversions for every PNG colour type, and
// libjpeg-turbo with its default (ISLOW, fancy upsampling) settings.
//
// libpng and libjpeg report fatal errors through a callback that must not return. We leave it
// with longjmp back into small functions that own nothing with a destructor, and turn the
// recorded message into an Error once we are back in ordinary C++ code.
#include "io/image.h"

#include <jpeglib.h>
// jerror.h must follow jpeglib.h.
#include <jerror.h>
#include <png.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <csetjmp>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "lingbot/error.h"

namespace lingbot {
namespace {

namespace fs = std::filesystem;

[[noreturn]] void fail(const std::string& what, const std::string& why) {
  throw Error(what + ": " + why);
}

void check_size(const std::string& what, uint64_t w, uint64_t h, size_t max_pixels) {
  if (w == 0 || h == 0)
    fail(what, "the image has no pixels (" + std::to_string(w) + "x" + std::to_string(h) + ")");
  if (w * h > max_pixels)
    fail(what, "the image is " + std::to_string(w) + "x" + std::to_string(h) +
                   " pixels, more than the limit of " + std::to_string(max_pixels));
}

// ---------------------------------------------------------------------------------------------
// EXIF orientation

uint32_t read_u16(const uint8_t* p, bool big) {
  return big ? (p[0] << 8 | p[1]) : (p[1] << 8 | p[0]);
}
uint32_t read_u32(const uint8_t* p, bool big) {
  return big ? (uint32_t(p[0]) << 24 | p[1] << 16 | p[2] << 8 | p[3])
             : (uint32_t(p[3]) << 24 | p[2] << 16 | p[1] << 8 | p[0]);
}

// What Pillow's getexif() makes of the Orientation tag (0x0112) in IFD0 of a TIFF-structured
// EXIF block. `present` decides whether the XMP fallback is consulted; `value` is the tag's
// number when it has one (Python compares it with the ints 2..8, so 6.0 or 12/2 count too).
struct OrientationTag {
  bool present = false;
  double value = 0;
};

OrientationTag exif_orientation(const uint8_t* d, size_t n) {
  while (n >= 6 && std::memcmp(d, "Exif\0\0", 6) == 0) d += 6, n -= 6;
  OrientationTag tag;
  if (n < 8) return tag;
  bool big;
  // Pillow accepts both byte orders of the magic 42 with either endianness mark.
  if (d[0] == 'M' && d[1] == 'M' && ((d[2] == 0 && d[3] == 42) || (d[2] == 42 && d[3] == 0)))
    big = true;
  else if (d[0] == 'I' && d[1] == 'I' && ((d[2] == 42 && d[3] == 0) || (d[2] == 0 && d[3] == 42)))
    big = false;
  else
    return tag;
  const uint64_t ifd = read_u32(d + 4, big);
  if (ifd + 2 > n) return tag;
  const uint32_t count = read_u16(d + ifd, big);
  // Like Pillow, entries read before any damage count; a later duplicate replaces an earlier one.
  for (uint32_t i = 0; i < count; ++i) {
    const uint64_t e = ifd + 2 + 12ull * i;
    if (e + 12 > n) break;
    if (read_u16(d + e, big) != 0x0112) continue;
    const uint32_t type = read_u16(d + e + 2, big), values = read_u32(d + e + 4, big);
    int size;
    switch (type) {
      case 1:
      case 2:
      case 6:
      case 7:
        size = 1;
        break;
      case 3:
      case 8:
        size = 2;
        break;
      case 4:
      case 9:
      case 11:
      case 13:
        size = 4;
        break;
      case 5:
      case 10:
      case 12:
      case 16:
      case 17:
      case 18:
        size = 8;
        break;
      default:
        continue;  // unknown types are skipped, as if the entry were not there
    }
    const uint64_t bytes = uint64_t(values) * size;
    uint64_t at = e + 8;
    if (bytes > 4) {
      at = read_u32(d + e + 8, big);
      if (at + bytes > n) continue;  // data outside the block: Pillow drops the entry
    }
    tag.present = true;
    tag.value = 0;
    // Pillow keeps the first value even when the count is wrong; text, raw bytes and an empty
    // value never select a transpose.
    if (values == 0 || type == 2 || type == 7) continue;
    const uint8_t* p = d + at;
    auto u64 = [&](const uint8_t* q) {
      const uint64_t hi = read_u32(q, big), lo = read_u32(q + 4, big);
      return big ? (hi << 32 | lo) : (lo << 32 | hi);
    };
    switch (type) {
      case 1:
        tag.value = p[0];
        break;
      case 6:
        tag.value = int8_t(p[0]);
        break;
      case 3:
        tag.value = read_u16(p, big);
        break;
      case 8:
        tag.value = int16_t(read_u16(p, big));
        break;
      case 4:
      case 13:
        tag.value = read_u32(p, big);
        break;
      case 9:
        tag.value = int32_t(read_u32(p, big));
        break;
      case 16:
      case 18:
        tag.value = double(u64(p));
        break;
      case 17:
        tag.value = double(int64_t(u64(p)));
        break;
      case 5:
      case 10: {
        const uint32_t num = read_u32(p, big), den = read_u32(p + 4, big);
        if (den != 0)
          tag.value = type == 5 ? double(num) / den : double(int32_t(num)) / int32_t(den);
        break;
      }
      case 11: {
        const uint32_t bits = read_u32(p, big);
        float f;
        std::memcpy(&f, &bits, 4);
        tag.value = f;
        break;
      }
      case 12: {
        const uint64_t bits = u64(p);
        std::memcpy(&tag.value, &bits, 8);
        break;
      }
    }
  }
  return tag;
}

// Pillow's fallback when the EXIF block has no Orientation: the first match of
// `tiff:Orientation(="|>)([0-9])` in the XMP packet. Returns the digit, or 0.
int xmp_orientation(const char* s, size_t n) {
  static const char kKey[] = "tiff:Orientation";
  const size_t k = sizeof kKey - 1;
  for (size_t i = 0; i + k < n; ++i) {
    if (std::memcmp(s + i, kKey, k) != 0) continue;
    size_t j = i + k;
    if (s[j] == '>') {
      ++j;
    } else if (s[j] == '=' && j + 1 < n && s[j + 1] == '"') {
      j += 2;
    } else {
      continue;
    }
    if (j < n && s[j] >= '0' && s[j] <= '9') return s[j] - '0';
  }
  return 0;
}

// The transpose ImageOps.exif_transpose picks: 2..8, or 1 for none.
int resolve_orientation(const std::vector<uint8_t>& exif, const std::vector<char>& xmp) {
  const OrientationTag tag = exif_orientation(exif.data(), exif.size());
  double v = tag.value;
  if (!tag.present) v = xmp_orientation(xmp.data(), xmp.size());
  for (int o = 2; o <= 8; ++o)
    if (v == o) return o;
  return 1;
}

// Pillow's ImageOps.exif_transpose: orientation 2..8 becomes a lossless flip or rotation.
ImageU8 apply_orientation(ImageU8 img, int orientation) {
  if (orientation < 2 || orientation > 8) return img;
  // Output pixel (x, y) reads the stored pixel at (a, b) = swap ? (y, x) : (x, y), with a and/or
  // b mirrored: 2 mirror, 3 rotate 180, 4 flip, 5 transpose, 6 rotate 90 clockwise,
  // 7 transverse, 8 rotate 90 counter-clockwise.
  struct Op {
    bool swap, mirror_a, mirror_b;
  };
  static constexpr Op kOps[9] = {{},
                                 {},
                                 {false, true, false},
                                 {false, true, true},
                                 {false, false, true},
                                 {true, false, false},
                                 {true, false, true},
                                 {true, true, true},
                                 {true, true, false}};
  const Op op = kOps[orientation];
  const int W = img.width, H = img.height;
  ImageU8 out;
  out.width = op.swap ? H : W;
  out.height = op.swap ? W : H;
  out.rgb.resize(img.rgb.size());
  for (int y = 0; y < out.height; ++y) {
    for (int x = 0; x < out.width; ++x) {
      int a = op.swap ? y : x, b = op.swap ? x : y;
      if (op.mirror_a) a = W - 1 - a;
      if (op.mirror_b) b = H - 1 - b;
      const uint8_t* s = &img.rgb[(size_t(b) * W + a) * 3];
      uint8_t* o = &out.rgb[(size_t(y) * out.width + x) * 3];
      o[0] = s[0], o[1] = s[1], o[2] = s[2];
    }
  }
  return out;
}

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

ImageU8 decode_png(const uint8_t* data, size_t size, const std::string& what, size_t max_pixels) {
  PngSource src{};
  src.data = data;
  src.size = size;
  png_structp png =
      png_create_read_struct(PNG_LIBPNG_VER_STRING, &src, png_on_error, png_on_warning);
  png_infop info = png ? png_create_info_struct(png) : nullptr;
  if (!info) {
    png_destroy_read_struct(&png, nullptr, nullptr);
    throw std::bad_alloc();
  }
  struct Guard {
    png_structp* png;
    png_infop* info;
    ~Guard() { png_destroy_read_struct(png, info, nullptr); }
  } guard{&png, &info};
  png_set_read_fn(png, &src, png_on_read);
#ifdef FUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION
  // Checksums would reject nearly every mutation before it reaches the interesting code.
  png_set_crc_action(png, PNG_CRC_QUIET_USE, PNG_CRC_QUIET_USE);
  png_set_option(png, PNG_IGNORE_ADLER32, PNG_OPTION_ON);
#endif
  // libpng's default cap of 1,000,000 pixels per side would refuse images Pillow opens; the
  // pixel-count check below guards memory instead.
  png_set_user_limits(png, 0x7fffffff, 0x7fffffff);

  auto broken = [&]() -> std::string {
    if (src.truncated) return "the PNG data ends early (truncated file?)";
    return std::string("not a valid PNG file (") + src.message + ")";
  };

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

// ---------------------------------------------------------------------------------------------
// JPEG

struct JpegErrors {
  jpeg_error_mgr mgr;  // first, so libjpeg's err pointer is also ours
  jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
  bool truncated;
};

void jpeg_on_error(j_common_ptr cinfo) {
  auto* e = reinterpret_cast<JpegErrors*>(cinfo->err);
  cinfo->err->format_message(cinfo, e->message);
  longjmp(e->jump, 1);
}
// Warnings (corrupt but decodable data) do not stop Pillow, so they do not stop us.
void jpeg_on_message(j_common_ptr) {}

void jpeg_src_init(j_decompress_ptr) {}
void jpeg_src_term(j_decompress_ptr) {}
// The whole file is in memory from the start, so a request for more means it was cut short.
// (libjpeg's own memory source would invent an end marker and return grey instead.)
boolean jpeg_src_fill(j_decompress_ptr cinfo) {
  reinterpret_cast<JpegErrors*>(cinfo->err)->truncated = true;
  ERREXIT(cinfo, JERR_INPUT_EOF);
  return FALSE;
}
void jpeg_src_skip(j_decompress_ptr cinfo, long n) {
  jpeg_source_mgr* s = cinfo->src;
  if (n <= 0) return;
  if (size_t(n) > s->bytes_in_buffer) jpeg_src_fill(cinfo);
  s->next_input_byte += n;
  s->bytes_in_buffer -= size_t(n);
}

bool jpeg_create(j_decompress_ptr cinfo) {
  auto* e = reinterpret_cast<JpegErrors*>(cinfo->err);
  if (setjmp(e->jump)) return false;
  jpeg_create_decompress(cinfo);
  return true;
}

bool jpeg_read_head(j_decompress_ptr cinfo) {
  auto* e = reinterpret_cast<JpegErrors*>(cinfo->err);
  if (setjmp(e->jump)) return false;
  jpeg_save_markers(cinfo, JPEG_APP0 + 1, 0xffff);
  // Like Pillow, skip over table-only datastreams to the image that follows; each one consumes
  // input, so the loop ends at the latest when the data does.
  while (jpeg_read_header(cinfo, FALSE) == JPEG_HEADER_TABLES_ONLY) {
  }
  return true;
}

bool jpeg_start(j_decompress_ptr cinfo) {
  auto* e = reinterpret_cast<JpegErrors*>(cinfo->err);
  if (setjmp(e->jump)) return false;
  jpeg_start_decompress(cinfo);
  return true;
}

bool jpeg_read_row(j_decompress_ptr cinfo, JSAMPROW row) {
  auto* e = reinterpret_cast<JpegErrors*>(cinfo->err);
  if (setjmp(e->jump)) return false;
  jpeg_read_scanlines(cinfo, &row, 1);
  return true;
}

// Pillow's CMYK -> RGB: r = (255-k) - (255-k)*c/255 with its rounded divide-by-255.
uint8_t cmyk_channel(int c, int nk) {
  const int t = c * nk + 128;
  return uint8_t(std::clamp(nk - (((t >> 8) + t) >> 8), 0, 255));
}

ImageU8 decode_jpeg(const uint8_t* data, size_t size, const std::string& what, size_t max_pixels) {
  jpeg_decompress_struct cinfo{};
  JpegErrors err{};
  cinfo.err = jpeg_std_error(&err.mgr);
  err.mgr.error_exit = jpeg_on_error;
  err.mgr.output_message = jpeg_on_message;
  if (!jpeg_create(&cinfo)) throw std::bad_alloc();
  struct Guard {
    jpeg_decompress_struct* c;
    ~Guard() { jpeg_destroy_decompress(c); }
  } guard{&cinfo};

  jpeg_source_mgr src{};
  src.next_input_byte = data;
  src.bytes_in_buffer = size;
  src.init_source = jpeg_src_init;
  src.fill_input_buffer = jpeg_src_fill;
  src.skip_input_data = jpeg_src_skip;
  src.resync_to_restart = jpeg_resync_to_restart;
  src.term_source = jpeg_src_term;
  cinfo.src = &src;

  auto broken = [&]() -> std::string {
    if (err.truncated) return "the JPEG data ends early (truncated file?)";
    return std::string("not a valid JPEG file (") + err.message + ")";
  };

  if (!jpeg_read_head(&cinfo)) fail(what, broken());
  check_size(what, cinfo.image_width, cinfo.image_height, max_pixels);
  const int comps = cinfo.num_components;
  // Pillow opens 1, 3 and 4 components as L, RGB and CMYK and refuses anything else.
  if (comps == 1)
    cinfo.out_color_space = JCS_GRAYSCALE;
  else if (comps == 3)
    cinfo.out_color_space = JCS_RGB;
  else if (comps == 4)
    cinfo.out_color_space = JCS_CMYK;
  else
    fail(what, "unsupported JPEG with " + std::to_string(comps) + " colour components");

  // Pillow's EXIF is the first Exif segment with the TIFF data of any later ones appended; its
  // XMP is the packet of the last XMP segment.
  std::vector<uint8_t> exif;
  std::vector<char> xmp;
  static const char kXmp[] = "http://ns.adobe.com/xap/1.0/";  // and its terminating NUL
  for (jpeg_saved_marker_ptr m = cinfo.marker_list; m; m = m->next) {
    if (m->marker != JPEG_APP0 + 1) continue;
    const uint8_t* p = m->data;
    const size_t n = m->data_length;
    if (n >= 6 && std::memcmp(p, "Exif\0\0", 6) == 0)
      exif.insert(exif.end(), p + (exif.empty() ? 0 : 6), p + n);
    else if (n >= sizeof kXmp && std::memcmp(p, kXmp, sizeof kXmp) == 0)
      xmp.assign(p + sizeof kXmp, p + n);
  }
  const int orientation = resolve_orientation(exif, xmp);

  const int w = int(cinfo.image_width), h = int(cinfo.image_height);
  if (!jpeg_start(&cinfo)) fail(what, broken());
  const size_t stride = size_t(w) * comps;
  std::vector<uint8_t> pix;
  // Grown row by row, so that a short file claiming a huge size fails before the memory is
  // touched. No jpeg_finish_decompress afterwards: it only looks for the end marker.
  pix.reserve(stride * h);
  while (cinfo.output_scanline < cinfo.output_height) {
    pix.resize(stride * (cinfo.output_scanline + 1));
    if (!jpeg_read_row(&cinfo, pix.data() + stride * cinfo.output_scanline)) fail(what, broken());
  }

  ImageU8 img;
  img.width = w;
  img.height = h;
  if (comps == 3) {
    img.rgb = std::move(pix);
  } else {
    img.rgb.resize(size_t(w) * h * 3);
    const size_t n = size_t(w) * h;
    for (size_t i = 0; i < n; ++i) {
      uint8_t* o = &img.rgb[i * 3];
      if (comps == 1) {
        o[0] = o[1] = o[2] = pix[i];
      } else {
        // Pillow assumes Adobe's inverted CMYK for every 4-component JPEG.
        const uint8_t* p = &pix[i * 4];
        const int nk = p[3];  // 255 - (255 - k)
        for (int c = 0; c < 3; ++c) o[c] = cmyk_channel(255 - p[c], nk);
      }
    }
  }
  return apply_orientation(std::move(img), orientation);
}

}  // namespace

// ---------------------------------------------------------------------------------------------

ImageU8 decode_image(const uint8_t* data, size_t size, const std::string& what, size_t max_pixels) {
  static const uint8_t kPng[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  if (size == 0) fail(what, "the file is empty");
  if (size < 8 && std::memcmp(data, kPng, size) == 0)
    fail(what, "the PNG data ends early (truncated file?)");
  if (size >= 8 && std::memcmp(data, kPng, 8) == 0) return decode_png(data, size, what, max_pixels);
  static const uint8_t kJpeg[3] = {0xff, 0xd8, 0xff};
  if (size < 3 && std::memcmp(data, kJpeg, size) == 0)
    fail(what, "the JPEG data ends early (truncated file?)");
  if (size >= 3 && std::memcmp(data, kJpeg, 3) == 0)
    return decode_jpeg(data, size, what, max_pixels);
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
      png_create_write_struct(PNG_LIBPNG_VER_STRING, &sink, png_sink_error, png_on_warning);
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

// ---------------------------------------------------------------------------------------------
// Folders

bool natural_less(const std::string& a, const std::string& b) {
  size_t i = 0, j = 0;
  auto digit = [](char c) { return c >= '0' && c <= '9'; };
  while (i < a.size() && j < b.size()) {
    if (digit(a[i]) && digit(b[j])) {
      size_t i0 = i, j0 = j;
      while (i < a.size() && digit(a[i])) ++i;
      while (j < b.size() && digit(b[j])) ++j;
      // Compare by value: skip leading zeros, then longer is larger, then digit by digit.
      size_t ia = i0, jb = j0;
      while (ia + 1 < i && a[ia] == '0') ++ia;
      while (jb + 1 < j && b[jb] == '0') ++jb;
      if (i - ia != j - jb) return i - ia < j - jb;
      const int c = a.compare(ia, i - ia, b, jb, j - jb);
      if (c != 0) return c < 0;
      // Equal values: fewer leading zeros first, so the order stays total ("1" < "01").
      if (i - i0 != j - j0) return i - i0 < j - j0;
    } else {
      if (a[i] != b[j]) return uint8_t(a[i]) < uint8_t(b[j]);
      ++i, ++j;
    }
  }
  return a.size() - i < b.size() - j;
}

std::vector<std::string> list_images(const std::string& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    throw fs::exists(dir, ec) ? Error(dir + ": is not a folder", ErrorKind::InvalidArgument)
                              : Error(dir + ": no such folder", ErrorKind::NotFound);
  std::vector<std::pair<std::string, std::string>> found;  // (file name, full path)
  fs::directory_iterator it(dir, ec), end;
  if (ec) throw Error(dir + ": cannot list the folder (" + ec.message() + ")");
  for (; it != end; it.increment(ec)) {
    if (ec) throw Error(dir + ": cannot list the folder (" + ec.message() + ")");
    if (!it->is_regular_file(ec)) continue;
    std::string ext = it->path().extension().string();
    std::transform(ext.begin(), ext.end(), ext.begin(),
                   [](unsigned char c) { return char(std::tolower(c)); });
    if (ext == ".png" || ext == ".jpg" || ext == ".jpeg")
      found.emplace_back(it->path().filename().string(), it->path().string());
  }
  if (found.empty()) throw Error(dir + ": the folder holds no .png, .jpg or .jpeg images");
  std::sort(found.begin(), found.end(),
            [](const auto& x, const auto& y) { return natural_less(x.first, y.first); });
  std::vector<std::string> paths;
  for (auto& f : found) paths.push_back(std::move(f.second));
  return paths;
}

}  // namespace lingbot
