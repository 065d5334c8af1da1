// Every rounding step below is Pillow's or PyTorch's, in their order: the point is bit parity
// with the reference's frames, not the best-looking resize.
#include "io/preprocess.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "lingbot/error.h"

namespace lingbot {
namespace {

constexpr int kPrecisionBits = 32 - 8 - 2;  // Pillow's 8-bit resampler keeps 22 fraction bits

// Keys' cubic with a = -0.5, in the nested form Pillow evaluates (it matters for the last bit
// of the double weights, and so occasionally for the rounded fixed-point ones).
double bicubic(double x) {
  constexpr double a = -0.5;
  if (x < 0.0) x = -x;
  if (x < 1.0) return ((a + 2.0) * x - (a + 3.0)) * x * x + 1;
  if (x < 2.0) return (((x - 5) * x + 8) * x - 4) * a;
  return 0.0;
}

int floor_div(int a, int b) {
  return a / b - ((a % b != 0) && ((a < 0) != (b < 0)));
}

uint8_t clip8(int32_t acc) {
  const int32_t v = acc >> kPrecisionBits;
  return uint8_t(v < 0 ? 0 : v > 255 ? 255 : v);
}

// Horizontal pass over source rows [y0, y0 + rows), into `out` (width w.first.size()).
void resample_rows(const ImageU8& in, int y0, int rows, const ResampleWeights& w, ImageU8& out) {
  const int ow = int(w.first.size());
  out.width = ow;
  out.height = rows;
  out.rgb.assign(size_t(ow) * rows * 3, 0);
#pragma omp parallel for schedule(static)
  for (int y = 0; y < rows; ++y) {
    const uint8_t* src = &in.rgb[size_t(y0 + y) * in.width * 3];
    uint8_t* dst = &out.rgb[size_t(y) * ow * 3];
    for (int x = 0; x < ow; ++x) {
      const int32_t* k = &w.k[size_t(x) * w.ksize];
      const uint8_t* s = src + size_t(w.first[x]) * 3;
      int32_t a0 = 1 << (kPrecisionBits - 1), a1 = a0, a2 = a0;
      for (int m = 0; m < w.count[x]; ++m, s += 3) {
        a0 += s[0] * k[m];
        a1 += s[1] * k[m];
        a2 += s[2] * k[m];
      }
      dst[3 * x] = clip8(a0), dst[3 * x + 1] = clip8(a1), dst[3 * x + 2] = clip8(a2);
    }
  }
}

// Vertical pass; `shift` is subtracted from the weights' first rows because the input may be
// the horizontal pass's output, which starts at that source row.
void resample_cols(const ImageU8& in, const ResampleWeights& w, int shift, ImageU8& out) {
  const int oh = int(w.first.size()), W = in.width;
  out.width = W;
  out.height = oh;
  out.rgb.assign(size_t(W) * oh * 3, 0);
#pragma omp parallel for schedule(static)
  for (int y = 0; y < oh; ++y) {
    const int32_t* k = &w.k[size_t(y) * w.ksize];
    const uint8_t* base = &in.rgb[size_t(w.first[y] - shift) * W * 3];
    uint8_t* dst = &out.rgb[size_t(y) * W * 3];
    for (int i = 0; i < W * 3; ++i) {
      int32_t acc = 1 << (kPrecisionBits - 1);
      const uint8_t* s = base + i;
      for (int m = 0; m < w.count[y]; ++m, s += size_t(W) * 3) acc += *s * k[m];
      dst[i] = clip8(acc);
    }
  }
}

}  // namespace

ResampleWeights bicubic_weights(int in_size, int out_size) {
  LINGBOT_CHECK(in_size > 0 && out_size > 0, "resize between empty sizes");
  constexpr double kSupport = 2.0;
  // Pillow forms the box width in float before the double division (exact for these sizes).
  const double scale = double(float(in_size) - 0.0f) / out_size;
  const double filterscale = std::max(scale, 1.0);
  const double support = kSupport * filterscale;
  const double ss = 1.0 / filterscale;
  ResampleWeights w;
  w.ksize = int(std::ceil(support)) * 2 + 1;
  w.first.resize(out_size);
  w.count.resize(out_size);
  w.k.assign(size_t(out_size) * w.ksize, 0);
  std::vector<double> pre(w.ksize);
  for (int o = 0; o < out_size; ++o) {
    const double center = (o + 0.5) * scale;
    const int lo = std::max(int(center - support + 0.5), 0);
    const int hi = std::min(int(center + support + 0.5), in_size);
    const int n = hi - lo;
    double sum = 0.0;
    for (int m = 0; m < n; ++m) {
      pre[m] = bicubic((m + lo - center + 0.5) * ss);
      sum += pre[m];
    }
    for (int m = 0; m < n; ++m) {
      const double v = sum != 0.0 ? pre[m] / sum : pre[m];
      // Round half away from zero by truncating after adding +-0.5, as Pillow does.
      w.k[size_t(o) * w.ksize + m] =
          int32_t(v < 0 ? -0.5 + v * (1 << kPrecisionBits) : 0.5 + v * (1 << kPrecisionBits));
    }
    w.first[o] = lo;
    w.count[o] = n;
  }
  return w;
}

ImageU8 resize_bicubic(const ImageU8& img, int width, int height) {
  LINGBOT_CHECK(width > 0 && height > 0,
                "cannot resize to " + std::to_string(width) + "x" + std::to_string(height));
  LINGBOT_CHECK(
      img.width > 0 && img.height > 0 && img.rgb.size() == size_t(img.width) * img.height * 3,
      "cannot resize an empty or inconsistent image");
  const bool horiz = width != img.width, vert = height != img.height;
  if (!horiz && !vert) return img;
  const ResampleWeights wy = bicubic_weights(img.height, height);
  if (!horiz) {
    ImageU8 out;
    resample_cols(img, wy, 0, out);
    return out;
  }
  const ResampleWeights wx = bicubic_weights(img.width, width);
  // Only the source rows the vertical pass will read go through the horizontal pass.
  int y0 = 0, y1 = img.height;
  if (vert) {
    y0 = wy.first.front();
    y1 = wy.first.back() + wy.count.back();
  }
  ImageU8 tmp;
  resample_rows(img, y0, y1 - y0, wx, tmp);
  if (!vert) return tmp;
  ImageU8 out;
  resample_cols(tmp, wy, y0, out);
  return out;
}

Size2 preprocess_resize_size(int width, int height, PreprocessMode mode, int target, int patch) {
  LINGBOT_CHECK(width > 0 && height > 0, "cannot preprocess an empty image");
  LINGBOT_CHECK_ARG(target > 0 && patch > 0, "the target size and patch size must be positive");
  if (mode == PreprocessMode::None) return {width, height};
  // Python: round(height * (target / width) / patch) * patch, round half to even.
  auto scaled = [&](int side, int other) {
    const double v = std::nearbyint(double(side) * (double(target) / double(other)) / patch);
    return v * patch;
  };
  double w = target, h = target;
  if (mode == PreprocessMode::Crop || width >= height)
    h = scaled(height, width);
  else
    w = scaled(width, height);
  if (w < 1 || h < 1 || w * h > double(kMaxImagePixels))
    throw Error("a " + std::to_string(width) + "x" + std::to_string(height) +
                " image is too elongated to preprocess: the resized size would be " +
                std::to_string(int64_t(w)) + "x" + std::to_string(int64_t(h)));
  return {int(w), int(h)};
}

Tensor preprocess(const ImageU8& img, PreprocessMode mode, int target, int patch) {
  LINGBOT_CHECK(
      img.width > 0 && img.height > 0 && img.rgb.size() == size_t(img.width) * img.height * 3,
      "cannot preprocess an empty or inconsistent image");
  if (mode == PreprocessMode::None) {
    LINGBOT_CHECK(patch > 0, "the patch size must be positive");
    if (img.width % patch != 0 || img.height % patch != 0)
      throw Error("the image is " + std::to_string(img.width) + "x" + std::to_string(img.height) +
                      ", but without resizing both sides must be multiples of the patch size " +
                      std::to_string(patch),
                  ErrorKind::InvalidArgument);
  }
  const Size2 rs = preprocess_resize_size(img.width, img.height, mode, target, patch);
  const ImageU8 r = resize_bicubic(img, rs.width, rs.height);

  // Rows/columns of `r` that land at output row/column 0, and the output size; negative
  // offsets mean white padding in front.
  int y0 = 0, x0 = 0, H = r.height, W = r.width;
  if (mode == PreprocessMode::Crop && r.height > target) {
    y0 = (r.height - target) / 2;
    H = target;
  } else if (mode == PreprocessMode::Pad) {
    const int dh = target - r.height, dw = target - r.width;
    if (dh > 0 || dw > 0) {
      // torch.nn.functional.pad: a negative amount (possible only when target is not a
      // multiple of patch) crops instead.
      y0 = -floor_div(dh, 2);
      x0 = -floor_div(dw, 2);
      H = target;
      W = target;
    }
  }

  Tensor out = Tensor::zeros({3, H, W}, DType::U8);
  uint8_t* o = out.data<uint8_t>();
  std::memset(o, 255, size_t(3) * H * W);
  for (int y = 0; y < H; ++y) {
    const int sy = y + y0;
    if (sy < 0 || sy >= r.height) continue;
    for (int x = 0; x < W; ++x) {
      const int sx = x + x0;
      if (sx < 0 || sx >= r.width) continue;
      const uint8_t* s = &r.rgb[(size_t(sy) * r.width + sx) * 3];
      for (int c = 0; c < 3; ++c) o[(size_t(c) * H + y) * W + x] = s[c];
    }
  }
  return out;
}

Tensor to_float01(const Tensor& chw_u8) {
  LINGBOT_CHECK(
      chw_u8.dtype() == DType::U8 && chw_u8.device() == Device::CPU,
      std::string("to_float01 expects a host uint8 tensor, got ") + dtype_name(chw_u8.dtype()));
  Tensor out = Tensor::zeros(chw_u8.shape(), DType::F32);
  const uint8_t* s = chw_u8.data<uint8_t>();
  float* d = out.f32();
  for (int64_t i = 0; i < chw_u8.numel(); ++i) d[i] = float(s[i]) / 255.0f;
  return out;
}

Tensor to_tensor(const ImageU8& img) {
  Tensor t = Tensor::zeros({3, img.height, img.width});
  const int64_t plane = static_cast<int64_t>(img.width) * img.height;
  for (int64_t i = 0; i < plane; ++i)
    for (int c = 0; c < 3; ++c)
      t.f32()[c * plane + i] = static_cast<float>(img.rgb[i * 3 + c]) / 255.0f;
  return t;
}

Tensor pad_batch_to_common_size(const std::vector<Tensor>& frames) {
  LINGBOT_CHECK(!frames.empty(), "no frames to stack");
  const DType dt = frames[0].dtype();
  LINGBOT_CHECK(dt == DType::U8 || dt == DType::F32, "frames must be uint8 or float32");
  int64_t H = 0, W = 0;
  for (const Tensor& f : frames) {
    LINGBOT_CHECK(
        f.rank() == 3 && f.dim(0) == 3 && f.dtype() == dt && f.device() == Device::CPU,
        "frames must all be host [3, H, W] tensors of one dtype, got " + shape_str(f.shape()));
    H = std::max(H, f.dim(1));
    W = std::max(W, f.dim(2));
  }
  const int64_t N = int64_t(frames.size());
  Tensor out = Tensor::zeros({N, 3, H, W}, dt);
  const size_t es = dtype_size(dt);
  for (int64_t n = 0; n < N; ++n) {
    const Tensor& f = frames[n];
    const int64_t h = f.dim(1), w = f.dim(2), top = (H - h) / 2, left = (W - w) / 2;
    char* dst = static_cast<char*>(out.raw()) + size_t(n) * 3 * H * W * es;
    if (dt == DType::U8) {
      std::memset(dst, 255, size_t(3) * H * W);
    } else {
      std::fill_n(reinterpret_cast<float*>(dst), 3 * H * W, 1.0f);
    }
    const char* src = static_cast<const char*>(f.raw());
    for (int64_t c = 0; c < 3; ++c)
      for (int64_t y = 0; y < h; ++y)
        std::memcpy(dst + ((c * H + y + top) * W + left) * es, src + ((c * h + y) * w) * es,
                    size_t(w) * es);
  }
  return out;
}

}  // namespace lingbot
