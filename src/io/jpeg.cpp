// JPEG in, through libjpeg-turbo with its default (ISLOW, fancy upsampling) settings as Pillow
// uses it; EXIF and XMP from the APP1 segments.
//
// libpng and libjpeg report fatal errors through a callback that must not return. We leave it
// with longjmp back into small functions that own nothing with a destructor, and turn the
// recorded message into an Error once we are back in ordinary C++ code.
#include <cstddef>
#include <cstdio>
// jpeglib.h needs size_t and FILE declared before it.
#include <jpeglib.h>
// jerror.h must follow jpeglib.h.
#include <jerror.h>

#include <algorithm>
#include <csetjmp>
#include <cstdlib>
#include <cstring>

#include "io/image_codec.h"
#include "lingbot/error.h"

namespace lingbot::codec {
namespace {

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

}  // namespace

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

}  // namespace lingbot::codec

namespace lingbot::codec {
namespace {

// Owns nothing with a destructor (see the top of the file); libjpeg allocates *out.
bool jpeg_encode_all(j_compress_ptr cinfo, const ImageU8& img, int quality, unsigned char** out,
                     unsigned long* size) {
  auto* e = reinterpret_cast<JpegErrors*>(cinfo->err);
  if (setjmp(e->jump)) return false;
  jpeg_create_compress(cinfo);
  jpeg_mem_dest(cinfo, out, size);
  cinfo->image_width = static_cast<JDIMENSION>(img.width);
  cinfo->image_height = static_cast<JDIMENSION>(img.height);
  cinfo->input_components = 3;
  cinfo->in_color_space = JCS_RGB;
  jpeg_set_defaults(cinfo);
  jpeg_set_quality(cinfo, quality, TRUE);
  jpeg_start_compress(cinfo, TRUE);
  while (cinfo->next_scanline < cinfo->image_height) {
    JSAMPROW row = const_cast<JSAMPROW>(img.rgb.data() +
                                        static_cast<size_t>(cinfo->next_scanline) * img.width * 3);
    jpeg_write_scanlines(cinfo, &row, 1);
  }
  jpeg_finish_compress(cinfo);
  return true;
}

}  // namespace

std::vector<uint8_t> encode_jpeg(const ImageU8& img, int quality) {
  if (img.width <= 0 || img.height <= 0 ||
      img.rgb.size() != static_cast<size_t>(img.width) * img.height * 3)
    fail("JPEG encoder", "not an RGB image of its size");
  jpeg_compress_struct cinfo{};
  JpegErrors errors{};
  cinfo.err = jpeg_std_error(&errors.mgr);
  errors.mgr.error_exit = jpeg_on_error;
  errors.mgr.output_message = jpeg_on_message;
  unsigned char* out = nullptr;
  unsigned long size = 0;
  const bool ok = jpeg_encode_all(&cinfo, img, quality, &out, &size);
  jpeg_destroy_compress(&cinfo);
  std::vector<uint8_t> bytes;
  if (ok) bytes.assign(out, out + size);
  std::free(out);
  if (!ok) fail("JPEG encoder", errors.message);
  return bytes;
}

}  // namespace lingbot::codec
