#include <gtest/gtest.h>
#include <jpeglib.h>
#include <png.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <csetjmp>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "io/image.h"
#include "io/image_codec.h"
#include "lingbot/error.h"
#include "test_util.h"

namespace lingbot {
namespace {

namespace fs = std::filesystem;

// A fresh folder per test, removed afterwards.
using ImageIo = test::TempDirTest;

std::vector<uint8_t> read_bytes(const std::string& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}
void write_bytes(const std::string& p, const uint8_t* d, size_t n) {
  std::ofstream(p, std::ios::binary).write(reinterpret_cast<const char*>(d), std::streamsize(n));
}

// Any PNG colour type and depth, written straight through libpng. `samples` holds packed rows
// exactly as PNG stores them (big-endian 16-bit, sub-byte samples packed MSB first).
struct RawPng {
  int w = 0, h = 0, bit_depth = 8, color_type = PNG_COLOR_TYPE_RGB;
  bool interlace = false;
  std::vector<uint8_t> samples;
  std::vector<png_color> palette;
  std::vector<uint8_t> trns_alpha;  // palette images
  bool rgb_trns = false;
  std::vector<uint8_t> exif;
};

void write_raw_png(const std::string& p, const RawPng& r) {
  FILE* f = std::fopen(p.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, nullptr, nullptr, nullptr);
  png_infop info = png_create_info_struct(png);
  if (setjmp(png_jmpbuf(png))) {
    png_destroy_write_struct(&png, &info);
    std::fclose(f);
    FAIL() << "libpng could not write the test image";
  }
  png_init_io(png, f);
  png_set_IHDR(png, info, r.w, r.h, r.bit_depth, r.color_type,
               r.interlace ? PNG_INTERLACE_ADAM7 : PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT,
               PNG_FILTER_TYPE_DEFAULT);
  if (!r.palette.empty()) png_set_PLTE(png, info, r.palette.data(), int(r.palette.size()));
  if (!r.trns_alpha.empty())
    png_set_tRNS(png, info, r.trns_alpha.data(), int(r.trns_alpha.size()), nullptr);
  if (r.rgb_trns) {
    png_color_16 c{};
    c.red = c.green = c.blue = 0;
    png_set_tRNS(png, info, nullptr, 0, &c);
  }
  if (!r.exif.empty())
    png_set_eXIf_1(png, info, png_uint_32(r.exif.size()), const_cast<uint8_t*>(r.exif.data()));
  png_write_info(png, info);
  const size_t stride = r.samples.size() / r.h;
  std::vector<png_bytep> rows(r.h);
  for (int y = 0; y < r.h; ++y) rows[y] = const_cast<uint8_t*>(r.samples.data()) + y * stride;
  png_write_image(png, rows.data());
  png_write_end(png, nullptr);
  png_destroy_write_struct(&png, &info);
  std::fclose(f);
}

// The first pixel's RGB.
std::vector<int> px(const ImageU8& img, int x, int y) {
  const uint8_t* p = &img.rgb[(size_t(y) * img.width + x) * 3];
  return {p[0], p[1], p[2]};
}

using test::error_of;

TEST_F(ImageIo, PngRoundTrip) {
  ImageU8 img;
  img.width = 7;
  img.height = 5;
  for (int i = 0; i < 7 * 5 * 3; ++i) img.rgb.push_back(uint8_t(i * 37 + 11));
  write_png(path("a.png"), img);
  EXPECT_FALSE(fs::exists(path("a.png.partial")));
  const ImageU8 back = load_image(path("a.png"));
  EXPECT_EQ(back.width, 7);
  EXPECT_EQ(back.height, 5);
  EXPECT_EQ(back.rgb, img.rgb);
}

TEST_F(ImageIo, Gray16WritesFullPrecisionAndReadsAsPillowDoes) {
  const uint16_t depth[6] = {0, 100, 255, 256, 1000, 65535};
  write_png_gray16(path("d.png"), 3, 2, depth);
  // The file keeps all 16 bits ...
  png_image pi{};
  pi.version = PNG_IMAGE_VERSION;
  ASSERT_TRUE(png_image_begin_read_from_file(&pi, path("d.png").c_str()));
  EXPECT_EQ(pi.format & PNG_FORMAT_FLAG_LINEAR, PNG_FORMAT_FLAG_LINEAR);
  png_image_free(&pi);
  // ... while decoding follows Pillow's I;16 -> RGB, which saturates instead of scaling.
  const ImageU8 img = load_image(path("d.png"));
  const int want[6] = {0, 100, 255, 255, 255, 255};
  for (int i = 0; i < 6; ++i) EXPECT_EQ(px(img, i % 3, i / 3), (std::vector<int>(3, want[i])));
}

TEST_F(ImageIo, GrayAndLowBitDepths) {
  RawPng g;
  g.w = 4, g.h = 1, g.color_type = PNG_COLOR_TYPE_GRAY;
  g.samples = {0, 9, 200, 255};
  write_raw_png(path("g8.png"), g);
  ImageU8 img = load_image(path("g8.png"));
  EXPECT_EQ(px(img, 1, 0), (std::vector<int>{9, 9, 9}));
  EXPECT_EQ(px(img, 2, 0), (std::vector<int>{200, 200, 200}));

  // 2-bit grey 0,1,2,3 packed into one byte: 0b00011011 -> 0, 85, 170, 255.
  g.bit_depth = 2;
  g.samples = {0x1b};
  write_raw_png(path("g2.png"), g);
  img = load_image(path("g2.png"));
  for (int x = 0; x < 4; ++x) EXPECT_EQ(px(img, x, 0)[0], 85 * x);

  // 1-bit: 0 / 255.
  g.bit_depth = 1;
  g.samples = {0x50};  // 0 1 0 1
  write_raw_png(path("g1.png"), g);
  img = load_image(path("g1.png"));
  EXPECT_EQ(px(img, 0, 0)[0], 0);
  EXPECT_EQ(px(img, 1, 0)[0], 255);
}

TEST_F(ImageIo, PaletteImages) {
  RawPng p;
  p.w = 3, p.h = 1, p.bit_depth = 4, p.color_type = PNG_COLOR_TYPE_PALETTE;
  p.palette = {{10, 20, 30}, {40, 50, 60}, {70, 80, 90}};
  p.samples = {0x21, 0x50};  // indices 2, 1, 5 (5 is past the palette's end)
  write_raw_png(path("p.png"), p);
  ImageU8 img = load_image(path("p.png"));
  EXPECT_EQ(px(img, 0, 0), (std::vector<int>{70, 80, 90}));
  EXPECT_EQ(px(img, 1, 0), (std::vector<int>{40, 50, 60}));
  // Pillow's palettes start as a grey ramp.
  EXPECT_EQ(px(img, 2, 0), (std::vector<int>{5, 5, 5}));

  // Transparency in a palette image is dropped, not composited (mode P, not RGBA).
  p.samples = {0x01, 0x00};
  p.trns_alpha = {0, 128};
  write_raw_png(path("pt.png"), p);
  img = load_image(path("pt.png"));
  EXPECT_EQ(px(img, 0, 0), (std::vector<int>{10, 20, 30}));
  EXPECT_EQ(px(img, 1, 0), (std::vector<int>{40, 50, 60}));

  const ImageU8 fixture = load_image(test::fixtures_dir() + "/preproc/palette.png");
  EXPECT_EQ(fixture.width, 518);
  EXPECT_EQ(fixture.height, 294);
}

TEST_F(ImageIo, AlphaHandling) {
  // RGBA: composited over white with Pillow's integer formula.
  RawPng r;
  r.w = 4, r.h = 1, r.color_type = PNG_COLOR_TYPE_RGB_ALPHA;
  r.samples = {200, 0, 10, 0,    // fully transparent -> white
               200, 0, 10, 255,  // opaque -> unchanged
               200, 0, 10, 128,  // 200*128/255 + 127 = 227.4 -> 227; 0 -> 127; 10 -> 132
               1,   2, 3,  1};   // nearly transparent -> almost white
  write_raw_png(path("rgba.png"), r);
  ImageU8 img = load_image(path("rgba.png"));
  EXPECT_EQ(px(img, 0, 0), (std::vector<int>{255, 255, 255}));
  EXPECT_EQ(px(img, 1, 0), (std::vector<int>{200, 0, 10}));
  EXPECT_EQ(px(img, 2, 0), (std::vector<int>{227, 127, 132}));
  EXPECT_EQ(px(img, 3, 0), (std::vector<int>{254, 254, 254}));

  // 16-bit RGBA keeps the high bytes, then composites.
  r.bit_depth = 16;
  r.samples = {200, 99, 0, 99, 10, 99, 128, 99, 200, 1, 0, 1, 10, 1, 0, 1,
               1,   0,  1, 0,  1,  0,  255, 0,  0,   0, 0, 0, 0,  0, 0, 0};
  write_raw_png(path("rgba16.png"), r);
  img = load_image(path("rgba16.png"));
  EXPECT_EQ(px(img, 0, 0), (std::vector<int>{227, 127, 132}));
  EXPECT_EQ(px(img, 1, 0), (std::vector<int>{255, 255, 255}));
  EXPECT_EQ(px(img, 2, 0), (std::vector<int>{1, 1, 1}));

  // Grey + alpha (mode LA): alpha simply dropped.
  RawPng la;
  la.w = 2, la.h = 1, la.color_type = PNG_COLOR_TYPE_GRAY_ALPHA;
  la.samples = {77, 0, 150, 128};
  write_raw_png(path("la.png"), la);
  img = load_image(path("la.png"));
  EXPECT_EQ(px(img, 0, 0), (std::vector<int>{77, 77, 77}));
  EXPECT_EQ(px(img, 1, 0), (std::vector<int>{150, 150, 150}));

  // RGB with a tRNS colour key: still mode RGB, nothing composited.
  RawPng key;
  key.w = 1, key.h = 1, key.rgb_trns = true;
  key.samples = {0, 0, 0};
  write_raw_png(path("key.png"), key);
  EXPECT_EQ(px(load_image(path("key.png")), 0, 0), (std::vector<int>{0, 0, 0}));

  const ImageU8 fixture = load_image(test::fixtures_dir() + "/preproc/alpha.png");
  EXPECT_EQ(fixture.width, 400);
}

TEST_F(ImageIo, Rgb16AndInterlaced) {
  RawPng r;
  r.w = 5, r.h = 4, r.bit_depth = 16;
  for (int i = 0; i < 5 * 4 * 3; ++i) {
    r.samples.push_back(uint8_t(i * 13));
    r.samples.push_back(uint8_t(255 - i));
  }
  write_raw_png(path("rgb16.png"), r);
  const ImageU8 plain = load_image(path("rgb16.png"));
  for (int i = 0; i < 5 * 4 * 3; ++i) ASSERT_EQ(plain.rgb[i], uint8_t(i * 13)) << i;
  r.interlace = true;
  write_raw_png(path("rgb16i.png"), r);
  EXPECT_EQ(load_image(path("rgb16i.png")).rgb, plain.rgb);
}

// Reference transforms of a W x H image for each EXIF orientation (what the pixel at (x, y)
// of the displayed image is in the stored one).
std::vector<int> stored_xy(int o, int x, int y, int W, int H) {
  switch (o) {
    case 2:
      return {W - 1 - x, y};
    case 3:
      return {W - 1 - x, H - 1 - y};
    case 4:
      return {x, H - 1 - y};
    case 5:
      return {y, x};
    case 6:
      return {y, H - 1 - x};
    case 7:
      return {W - 1 - y, H - 1 - x};
    case 8:
      return {W - 1 - y, x};
  }
  return {x, y};
}

TEST_F(ImageIo, ExifOrientationInJpeg) {
  std::vector<uint8_t> jpg = read_bytes(test::fixtures_dir() + "/preproc/exif_rot6.jpg");
  // The fixture's one IFD entry is Orientation (SHORT) = 6; find its value bytes and rewrite
  // them for every other orientation.
  const uint8_t entry[] = {0x01, 0x12, 0x00, 0x03, 0x00, 0x00, 0x00, 0x01, 0x00, 0x06};
  auto at = std::search(jpg.begin(), jpg.end(), std::begin(entry), std::end(entry));
  ASSERT_NE(at, jpg.end());
  const size_t value = size_t(at - jpg.begin()) + 9;
  jpg[value] = 1;
  const ImageU8 stored = decode_image(jpg.data(), jpg.size(), "o1");
  ASSERT_EQ(stored.width, 480);
  ASSERT_EQ(stored.height, 272);
  for (int o = 0; o <= 9; ++o) {
    jpg[value] = uint8_t(o);
    const ImageU8 img = decode_image(jpg.data(), jpg.size(), "o" + std::to_string(o));
    const bool swap = o >= 5 && o <= 8;
    ASSERT_EQ(img.width, swap ? 272 : 480) << o;
    ASSERT_EQ(img.height, swap ? 480 : 272) << o;
    for (int y = 0; y < img.height; y += 7)
      for (int x = 0; x < img.width; x += 5) {
        const std::vector<int> s = stored_xy(o, x, y, 480, 272);
        ASSERT_EQ(px(img, x, y), px(stored, s[0], s[1])) << "orientation " << o;
      }
  }
}

TEST_F(ImageIo, ExifOrientationInPngChunk) {
  RawPng r;
  r.w = 3, r.h = 2;
  for (int i = 0; i < 18; ++i) r.samples.push_back(uint8_t(i * 10));
  // Little-endian TIFF, IFD0 with Orientation = 8 (rotate 90 counter-clockwise).
  r.exif = {'I', 'I', 42, 0, 8, 0, 0, 0, 1, 0, 0x12, 0x01, 3,
            0,   1,   0,  0, 0, 8, 0, 0, 0, 0, 0,    0,    0};
  write_raw_png(path("o8.png"), r);
  const ImageU8 img = load_image(path("o8.png"));
  ASSERT_EQ(img.width, 2);
  ASSERT_EQ(img.height, 3);
  // Displayed (0, 0) is stored (W-1, 0) = pixel 2 of row 0.
  EXPECT_EQ(px(img, 0, 0), (std::vector<int>{60, 70, 80}));
  EXPECT_EQ(px(img, 1, 2), (std::vector<int>{90, 100, 110}));
}

// A small JPEG through libjpeg's encoder, in any input colour space.
std::vector<uint8_t> encode_jpeg(int w, int h, int comps, J_COLOR_SPACE cs,
                                 const std::vector<uint8_t>& pixels,
                                 const std::vector<std::string>& app1 = {}) {
  jpeg_compress_struct c;
  jpeg_error_mgr err;
  c.err = jpeg_std_error(&err);
  jpeg_create_compress(&c);
  unsigned char* buf = nullptr;
  unsigned long size = 0;
  jpeg_mem_dest(&c, &buf, &size);
  c.image_width = w;
  c.image_height = h;
  c.input_components = comps;
  c.in_color_space = cs;
  jpeg_set_defaults(&c);
  jpeg_set_quality(&c, 100, TRUE);
  jpeg_start_compress(&c, TRUE);
  for (const std::string& m : app1)
    jpeg_write_marker(&c, JPEG_APP0 + 1, reinterpret_cast<const JOCTET*>(m.data()),
                      unsigned(m.size()));
  while (c.next_scanline < c.image_height) {
    JSAMPROW row = const_cast<uint8_t*>(pixels.data()) + size_t(c.next_scanline) * w * comps;
    jpeg_write_scanlines(&c, &row, 1);
  }
  jpeg_finish_compress(&c);
  jpeg_destroy_compress(&c);
  std::vector<uint8_t> out(buf, buf + size);
  std::free(buf);
  return out;
}

TEST_F(ImageIo, GrayAndCmykJpeg) {
  const std::vector<uint8_t> gray(16 * 16, 90);
  const std::vector<uint8_t> gj = encode_jpeg(16, 16, 1, JCS_GRAYSCALE, gray);
  const ImageU8 g = decode_image(gj.data(), gj.size(), "gray.jpg");
  EXPECT_EQ(px(g, 3, 3), (std::vector<int>{90, 90, 90}));

  // Stored Adobe-style (inverted): stored C=255, M=128, Y=255, K=205 means ink
  // c=0, m=127, y=0, k=50; Pillow gives r = (255-k) - (255-k)*c/255: 205, 103 (205-102), 205.
  std::vector<uint8_t> cmyk;
  for (int i = 0; i < 16 * 16; ++i) cmyk.insert(cmyk.end(), {255, 128, 255, 205});
  const std::vector<uint8_t> cj = encode_jpeg(16, 16, 4, JCS_CMYK, cmyk);
  const ImageU8 c = decode_image(cj.data(), cj.size(), "cmyk.jpg");
  const std::vector<int> got = px(c, 5, 5);
  EXPECT_NEAR(got[0], 205, 1);
  EXPECT_NEAR(got[1], 103, 1);
  EXPECT_NEAR(got[2], 205, 1);
}

// An 8x8 RGB JPEG whose top-left 4x4 quarter is black and the rest white, plus metadata.
ImageU8 quarter_jpeg(const std::vector<std::string>& app1) {
  std::vector<uint8_t> px;
  for (int y = 0; y < 16; ++y)
    for (int x = 0; x < 16; ++x) px.insert(px.end(), 3, (x < 8 && y < 8) ? 0 : 255);
  const std::vector<uint8_t> j = encode_jpeg(16, 16, 3, JCS_RGB, px, app1);
  return decode_image(j.data(), j.size(), "quarter.jpg");
}
bool dark(const ImageU8& img, int x, int y) {
  return px(img, x, y)[0] < 128;
}

std::string tiff_ifd0(uint16_t type, const std::vector<uint8_t>& value4, uint32_t count = 1) {
  // Big-endian TIFF with one IFD0 entry, Orientation of the given type.
  std::string t = std::string("MM\0*\0\0\0\x08\0\x01\x01\x12", 12);
  t += char(type >> 8), t += char(type & 0xff);
  t += char(count >> 24), t += char(count >> 16), t += char(count >> 8), t += char(count);
  t.append(value4.begin(), value4.end());
  t.append(4, '\0');
  return t;
}

TEST_F(ImageIo, OrientationFallbacksAndOddTypes) {
  const std::string exif = std::string("Exif\0\0", 6);
  const std::string xmp_id = std::string("http://ns.adobe.com/xap/1.0/\0", 29);
  // No metadata: black stays top-left.
  EXPECT_TRUE(dark(quarter_jpeg({}), 0, 0));
  // XMP only (both spellings): rotate 180 puts the black quarter bottom-right.
  ImageU8 img = quarter_jpeg({xmp_id + "<x:xmpmeta><tiff:Orientation>3</tiff:Orientation>"});
  EXPECT_FALSE(dark(img, 0, 0));
  EXPECT_TRUE(dark(img, 15, 15));
  img = quarter_jpeg({xmp_id + "<rdf:Description tiff:Orientation=\"3\"/>"});
  EXPECT_TRUE(dark(img, 15, 15));
  // An EXIF Orientation, even 1, wins over XMP.
  img = quarter_jpeg(
      {exif + tiff_ifd0(3, {0, 1, 0, 0}), xmp_id + "<tiff:Orientation>3</tiff:Orientation>"});
  EXPECT_TRUE(dark(img, 0, 0));
  // A RATIONAL 6/1 equals 6 in Python, so it rotates (90 clockwise: black goes top-right).
  std::string rational = tiff_ifd0(5, {0, 0, 0, 26});
  rational += std::string("\0\0\0\x06\0\0\0\x01", 8);  // at offset 26
  img = quarter_jpeg({exif + rational});
  EXPECT_TRUE(dark(img, 15, 0));
  EXPECT_FALSE(dark(img, 0, 0));
  // Text-typed or out-of-range values do nothing.
  EXPECT_TRUE(dark(quarter_jpeg({exif + tiff_ifd0(2, {'6', 0, 0, 0}, 2)}), 0, 0));
  EXPECT_TRUE(dark(quarter_jpeg({exif + tiff_ifd0(3, {0, 9, 0, 0})}), 0, 0));
  // A damaged block (IFD offset past the end) is ignored rather than fatal.
  EXPECT_TRUE(dark(quarter_jpeg({exif + "MM\0*\xff\xff\xff\xf0"}), 0, 0));
}

TEST_F(ImageIo, OrientationFromPngTextChunks) {
  RawPng r;
  r.w = 3, r.h = 2;
  for (int i = 0; i < 18; ++i) r.samples.push_back(uint8_t(i * 10));
  write_raw_png(path("plain.png"), r);
  // ImageMagick's hex dump of the EXIF block, orientation 3 (rotate 180).
  const std::string tiff = tiff_ifd0(3, {0, 3, 0, 0});
  std::string hex = "\nexif\n      " + std::to_string(tiff.size() + 6) + "\n457869660000";
  for (size_t i = 0; i < tiff.size(); ++i) {
    char b[3];
    std::snprintf(b, sizeof b, "%02x", uint8_t(tiff[i]));
    hex += b;
    if (i % 8 == 7) hex += "\n";
  }
  const std::vector<uint8_t> plain = read_bytes(path("plain.png"));
  for (const auto& [key, value] :
       {std::pair<std::string, std::string>{"Raw profile type exif", hex},
        {"XML:com.adobe.xmp", "<tiff:Orientation>3</tiff:Orientation>"}}) {
    // Splice a tEXt chunk in before IEND (the last 12 bytes); libpng verifies its CRC.
    std::string data = key + '\0' + value;
    std::vector<uint8_t> chunk = {uint8_t(data.size() >> 24),
                                  uint8_t(data.size() >> 16),
                                  uint8_t(data.size() >> 8),
                                  uint8_t(data.size()),
                                  't',
                                  'E',
                                  'X',
                                  't'};
    chunk.insert(chunk.end(), data.begin(), data.end());
    const uint32_t crc = png_uint_32(crc32(0, chunk.data() + 4, uInt(chunk.size() - 4)));
    for (int s = 24; s >= 0; s -= 8) chunk.push_back(uint8_t(crc >> s));
    std::vector<uint8_t> file(plain.begin(), plain.end() - 12);
    file.insert(file.end(), chunk.begin(), chunk.end());
    file.insert(file.end(), plain.end() - 12, plain.end());
    const ImageU8 img = decode_image(file.data(), file.size(), key);
    EXPECT_EQ(px(img, 0, 0), px(load_image(path("plain.png")), 2, 1)) << key;
  }
}

// ---------------------------------------------------------------------------------------------
// Bad input: always an Error naming the file, never a crash.

TEST_F(ImageIo, MissingEmptyAndGarbageFiles) {
  std::string e = error_of([&] { load_image(path("nope.png")); });
  EXPECT_NE(e.find("nope.png"), std::string::npos) << e;
  EXPECT_NE(e.find("no such file"), std::string::npos) << e;

  write_bytes(path("empty.jpg"), nullptr, 0);
  e = error_of([&] { load_image(path("empty.jpg")); });
  EXPECT_NE(e.find("empty.jpg: the file is empty"), std::string::npos) << e;

  const uint8_t junk[] = "this is not an image at all";
  write_bytes(path("junk.png"), junk, sizeof junk);
  e = error_of([&] { load_image(path("junk.png")); });
  EXPECT_NE(e.find("junk.png: unsupported image format"), std::string::npos) << e;

  e = error_of([&] { load_image(dir_.string()); });
  EXPECT_NE(e.find("is a folder"), std::string::npos) << e;

  // Right magic, garbage after it.
  const uint8_t fake_png[] = "\x89PNG\r\n\x1a\nthis is not a PNG after all";
  e = error_of([&] { decode_image(fake_png, sizeof fake_png, "fake.png"); });
  EXPECT_NE(e.find("fake.png: not a valid PNG file"), std::string::npos) << e;
  std::vector<uint8_t> fake_jpg = {0xff, 0xd8, 0xff, 0xe0, 0x00, 0x04, 1, 2, 0xff, 0x99};
  e = error_of([&] { decode_image(fake_jpg.data(), fake_jpg.size(), "fake.jpg"); });
  EXPECT_NE(e.find("fake.jpg: not a valid JPEG file"), std::string::npos) << e;
  // Tables only, no image: like Pillow we look for an image after it and run out of data.
  const std::vector<uint8_t> no_frame = {0xff, 0xd8, 0xff, 0xd9};
  e = error_of([&] { decode_image(no_frame.data(), no_frame.size(), "noframe.jpg"); });
  EXPECT_EQ(e.rfind("noframe.jpg: the JPEG data ends early", 0), 0u) << e;
}

TEST_F(ImageIo, TruncatedFiles) {
  for (const char* name : {"real0.png", "alpha.png", "palette.png", "big.jpg", "exif_rot6.jpg"}) {
    const std::vector<uint8_t> full = read_bytes(test::fixtures_dir() + "/preproc/" + name);
    ASSERT_GT(full.size(), 1000u) << name;
    for (double frac : {0.001, 0.01, 0.05, 0.2, 0.5, 0.8, 0.95}) {
      const size_t n = size_t(full.size() * frac);
      const std::string p = path(std::string("cut_") + name);
      write_bytes(p, full.data(), n);
      const std::string e = error_of([&] { load_image(p); });
      EXPECT_NE(e.find(p + ":"), std::string::npos) << name << " cut at " << n << ": " << e;
      if (frac >= 0.05) {
        EXPECT_NE(e.find("truncated"), std::string::npos) << name << " cut at " << n << ": " << e;
      }
    }
  }
  // Bytes after the end marker are ignored, as Pillow does.
  std::vector<uint8_t> jpg = read_bytes(test::fixtures_dir() + "/preproc/big.jpg");
  const ImageU8 whole = decode_image(jpg.data(), jpg.size(), "big.jpg");
  jpg.insert(jpg.end(), 100, 0x42);
  EXPECT_EQ(decode_image(jpg.data(), jpg.size(), "big.jpg").rgb, whole.rgb);
}

// A chunk that claims more data than the file holds ends what libpng is given, so it cannot make
// libpng allocate that claim (2 GB for a few hundred bytes, found by the image fuzzer).
TEST_F(ImageIo, PngChunkLongerThanTheFileIsTruncationNotAnAllocation) {
  const std::vector<uint8_t> full = read_bytes(test::fixtures_dir() + "/preproc/real0.png");
  ASSERT_GT(full.size(), 33u);
  EXPECT_EQ(codec::png_bytes_that_fit(full.data(), full.size()), full.size());
  std::vector<uint8_t> after_end = full;  // bytes after IEND are not chunks
  after_end.insert(after_end.end(), 100, 0xff);
  EXPECT_EQ(codec::png_bytes_that_fit(after_end.data(), after_end.size()), after_end.size());

  // Signature and IHDR (33 bytes), then a text chunk claiming 0x6e000000 bytes with 20 present.
  std::vector<uint8_t> lying(full.begin(), full.begin() + 33);
  const uint8_t text[] = {0x6e, 0, 0, 0, 't', 'E', 'X', 't'};
  lying.insert(lying.end(), text, text + sizeof text);
  lying.insert(lying.end(), 20, 'a');
  EXPECT_EQ(codec::png_bytes_that_fit(lying.data(), lying.size()), 33u);
  const std::string e = error_of([&] { decode_image(lying.data(), lying.size(), "lying.png"); });
  EXPECT_EQ(e.rfind("lying.png: the PNG data ends early", 0), 0u) << e;
  // Too short for any chunk: nothing to cut.
  EXPECT_EQ(codec::png_bytes_that_fit(full.data(), 5), 5u);
}

TEST_F(ImageIo, ListImagesNaturalOrder) {
  for (const char* n : {"10.png", "2.png", "1.jpg", "b.JPEG", "a.Png", "notes.txt", "img_020.png",
                        "img_3.png", "x01.png", "x1.png"})
    write_bytes(path(n), reinterpret_cast<const uint8_t*>("x"), 1);
  fs::create_directories(dir_ / "sub.png");
  const std::vector<std::string> got = list_images(dir_.string());
  std::vector<std::string> want;
  for (const char* n : {"1.jpg", "2.png", "10.png", "a.Png", "b.JPEG", "img_3.png", "img_020.png",
                        "x1.png", "x01.png"})
    want.push_back(path(n));
  EXPECT_EQ(got, want);

  EXPECT_TRUE(natural_less("frame2", "frame10"));
  EXPECT_FALSE(natural_less("frame10", "frame2"));
  EXPECT_TRUE(natural_less("a", "a1"));
  EXPECT_FALSE(natural_less("a1", "a1"));
}

TEST_F(ImageIo, ListImagesErrors) {
  std::string e = error_of([&] { list_images(path("missing")); });
  EXPECT_NE(e.find("missing: no such folder"), std::string::npos) << e;
  fs::create_directories(dir_ / "empty");
  e = error_of([&] { list_images(path("empty")); });
  EXPECT_NE(e.find("holds no .png, .jpg or .jpeg images"), std::string::npos) << e;
  write_bytes(path("file.png"), reinterpret_cast<const uint8_t*>("x"), 1);
  e = error_of([&] { list_images(path("file.png")); });
  EXPECT_NE(e.find("is not a folder"), std::string::npos) << e;
}

TEST_F(ImageIo, WriteErrors) {
  ImageU8 img;
  img.width = 1;
  img.height = 1;
  img.rgb = {1, 2, 3};
  const std::string e = error_of([&] { write_png(path("no/such/dir/x.png"), img); });
  EXPECT_NE(e.find("cannot write"), std::string::npos) << e;
}

}  // namespace
}  // namespace lingbot
