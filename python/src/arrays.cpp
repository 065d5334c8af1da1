// Images in: one layout convention for every function that takes a picture (push, preprocess,
// the drivers' frames). uint8 or float, channels first [3, H, W] or last [H, W, 3]; each function
// converts to what it needs, so the output of any of them (load_image: uint8 HWC, preprocess:
// uint8 CHW, load_images: float CHW) is accepted by the next. Errors name the argument and the
// array's dtype and shape, never its values.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <string>

#include "bindings.h"
#include "lingbot/image.h"

namespace lingbot::python {

namespace {

constexpr int64_t kPatch = 14;  // the model's patch size: frame sides are multiples of it

std::string shape_of(const py::array& a) {
  std::string s = "[";
  for (py::ssize_t i = 0; i < a.ndim(); ++i) s += (i ? ", " : "") + std::to_string(a.shape(i));
  return s + "]";
}

// A picture argument checked for dtype and layout (not yet for its size).
struct Picture {
  py::array array;
  bool u8 = false;   // else any float dtype
  bool chw = false;  // else [H, W, 3]
  int64_t height = 0, width = 0;
};

Picture picture(const py::handle& image, const std::string& what) {
  const std::string want =
      what + " must be a uint8 or float image, [H, W, 3] or [3, H, W] (RGB), got ";
  // (A default-constructed py::array is an empty array, not a null handle: hence `found`.)
  py::array a;
  bool found = false;
  if (py::isinstance<py::array>(image)) {
    a = py::reinterpret_borrow<py::array>(image);
    found = true;
  } else if (py::isinstance<py::list>(image) || py::isinstance<py::tuple>(image)) {
    py::array nested = py::array::ensure(image);  // nested lists: numpy picks the dtype
    if (nested) {
      a = nested;
      found = true;
    }
  }
  if (!found) throw BadArray(want + describe(image));
  Picture p;
  const char kind = a.dtype().kind();
  p.u8 = kind == 'u' && a.itemsize() == 1;
  const bool first = a.ndim() == 3 && a.shape(0) == 3, last = a.ndim() == 3 && a.shape(2) == 3;
  if (!(p.u8 || kind == 'f') || !(first || last)) throw BadArray(want + describe(a));
  // [3, H, 3] is ambiguous: uint8 pictures are usually channels-last (decoders, load_image),
  // float ones channels-first (model input, load_images).
  p.chw = first && last ? !p.u8 : first;
  p.array = a;
  p.height = a.shape(p.chw ? 1 : 0);
  p.width = a.shape(p.chw ? 2 : 1);
  return p;
}

uint8_t byte_of(uint8_t v) {
  return v;
}
uint8_t byte_of(float v) {  // [0, 1] to the nearest byte (exact for k / 255); NaN becomes 0
  return static_cast<uint8_t>(std::lround(std::clamp(v == v ? v : 0.f, 0.f, 1.f) * 255.f));
}

template <class T>
void put_hwc(const Picture& p, ImageU8& img) {
  const auto a = py::array_t<T, py::array::c_style | py::array::forcecast>::ensure(p.array);
  const T* src = a.data();
  const size_t n = static_cast<size_t>(p.height) * p.width;
  for (size_t i = 0; i < n; ++i)
    for (size_t c = 0; c < 3; ++c)
      img.rgb[i * 3 + c] = byte_of(p.chw ? src[c * n + i] : src[i * 3 + c]);
}

// The picture as uint8 HWC; floats are taken as [0, 1].
ImageU8 to_u8(const Picture& p) {
  ImageU8 img;
  img.height = static_cast<int>(p.height);
  img.width = static_cast<int>(p.width);
  img.rgb.resize(static_cast<size_t>(p.height) * p.width * 3);
  if (p.u8)
    put_hwc<uint8_t>(p, img);
  else
    put_hwc<float>(p, img);
  return img;
}

}  // namespace

std::string describe(const py::handle& value) {
  if (py::isinstance<py::array>(value)) {
    const auto a = py::reinterpret_borrow<py::array>(value);
    return std::string(py::str(a.dtype())) + " " + shape_of(a);
  }
  return std::string(py::str(py::type::handle_of(value).attr("__name__")));
}

Tensor frame_from_array(const py::handle& image, const std::string& what) {
  const Picture p = picture(image, what);
  if (p.height <= 0 || p.width <= 0 || p.height % kPatch || p.width % kPatch)
    throw py::value_error(what + " is " + std::to_string(p.width) + "x" + std::to_string(p.height) +
                          ": both sides must be positive multiples of 14 (preprocess it with "
                          "lingbot_map.preprocess, or load it with lingbot_map.load_images)");
  if (p.u8) {
    if (!p.chw) return to_tensor(to_u8(p));
    // Channels-first bytes convert as they are (the same (float)u / 255 as to_tensor).
    auto u8 = py::array_t<uint8_t, py::array::c_style | py::array::forcecast>::ensure(p.array);
    Tensor chw = Tensor::zeros({3, p.height, p.width}, DType::U8);
    std::memcpy(chw.raw(), u8.data(), chw.nbytes());
    return to_float01(chw);
  }
  auto f = py::array_t<float, py::array::c_style | py::array::forcecast>::ensure(p.array);
  Tensor t = Tensor::zeros({3, p.height, p.width});
  if (p.chw) {
    std::memcpy(t.f32(), f.data(), t.nbytes());
  } else {
    const size_t n = static_cast<size_t>(p.height) * p.width;
    const float* src = f.data();
    float* dst = t.f32();
    for (size_t i = 0; i < n; ++i)
      for (size_t c = 0; c < 3; ++c) dst[c * n + i] = src[i * 3 + c];
  }
  return t;
}

ImageU8 image_from_array(const py::handle& image, const std::string& what) {
  const Picture p = picture(image, what);
  if (p.height <= 0 || p.width <= 0)
    throw py::value_error(what + " is empty (" + describe(p.array) + ")");
  return to_u8(p);
}

}  // namespace lingbot::python
