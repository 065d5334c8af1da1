// EXIF orientation as Pillow's ImageOps.exif_transpose finds and applies it.
#include <cstring>

#include "io/image_codec.h"

namespace lingbot::codec {
namespace {

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

}  // namespace

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

}  // namespace lingbot::codec
