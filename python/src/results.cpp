// Frames in (numpy -> Tensor) and results out (FrameResult with numpy views of its arrays).
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

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

// A numpy view of a result's array; `owner` (the Python FrameResult) keeps it alive.
py::array_t<float> view(const py::object& owner, const float* data,
                        std::vector<py::ssize_t> shape) {
  return py::array_t<float>(shape, data, owner);
}

}  // namespace

Tensor frame_from_array(const py::handle& image) {
  py::array a = py::array::ensure(image);
  if (!a)
    throw py::value_error("a frame must be a numpy array (float32 [3, H, W] or uint8 [H, W, 3])");
  const char kind = a.dtype().kind();
  Tensor t;
  if (kind == 'u' && a.itemsize() == 1 && a.ndim() == 3 && a.shape(2) == 3) {
    auto u8 = py::array_t<uint8_t, py::array::c_style | py::array::forcecast>::ensure(a);
    ImageU8 img;
    img.height = static_cast<int>(u8.shape(0));
    img.width = static_cast<int>(u8.shape(1));
    img.rgb.assign(u8.data(), u8.data() + u8.size());
    t = to_tensor(img);
  } else if (kind == 'f' && a.ndim() == 3 && a.shape(0) == 3) {
    auto f = py::array_t<float, py::array::c_style | py::array::forcecast>::ensure(a);
    t = Tensor::zeros({3, f.shape(1), f.shape(2)});
    std::memcpy(t.f32(), f.data(), t.nbytes());
  } else {
    throw py::value_error("a frame must be float32 [3, H, W] in [0, 1] or uint8 [H, W, 3], got " +
                          std::string(py::str(a.dtype())) + " " + shape_of(a));
  }
  const int64_t h = t.dim(1), w = t.dim(2);
  if (h <= 0 || w <= 0 || h % kPatch || w % kPatch)
    throw py::value_error("the frame is " + std::to_string(w) + "x" + std::to_string(h) +
                          ": both sides must be positive multiples of 14 (preprocess it with "
                          "lingbot_map.load_images or lingbot_map.preprocess)");
  return t;
}

py::array_t<float> to_array(const float* data, std::vector<py::ssize_t> shape) {
  py::array_t<float> out(shape);
  std::memcpy(out.mutable_data(), data, out.nbytes());
  return out;
}

void bind_results(py::module_& m) {
  using R = FrameResult;
  py::class_<R, std::shared_ptr<R>>(m, "FrameResult",
                                    "One frame's predictions. The arrays are float32 views into "
                                    "the result (they keep it alive).")
      .def_readonly("index", &R::index, "Frame number in the sequence (from 0).")
      .def_readonly("keyframe", &R::keyframe, "Whether the frame was kept in the caches.")
      .def_readonly("height", &R::height)
      .def_readonly("width", &R::width)
      .def_property_readonly(
          "pose_enc",
          [](py::object self) { return view(self, self.cast<R&>().pose_enc.data(), {9}); },
          "[9]: translation, quaternion (x, y, z, w), field of view y and x.")
      .def_property_readonly(
          "c2w",
          [](py::object self) {
            return view(self, self.cast<R&>().c2w.data(), {3, 4});
          },
          "[3, 4] camera-to-world [R | t] (OpenCV axes: x right, y down, z forward).")
      .def_property_readonly(
          "w2c",
          [](py::object self) {
            return view(self, self.cast<R&>().w2c.data(), {3, 4});
          },
          "[3, 4] world-to-camera: the reference demo's `extrinsic`.")
      .def_property_readonly(
          "intrinsics",
          [](py::object self) {
            return view(self, self.cast<R&>().intrinsics.data(), {3, 3});
          },
          "[3, 3] pinhole intrinsics in pixels of the model input.")
      .def_property_readonly(
          "depth",
          [](py::object self) {
            const R& r = self.cast<R&>();
            return view(self, r.depth.data(), {r.height, r.width});
          },
          "[H, W] depth.")
      .def_property_readonly(
          "confidence",
          [](py::object self) {
            const R& r = self.cast<R&>();
            return view(self, r.confidence.data(), {r.height, r.width});
          },
          "[H, W] depth confidence (>= 1).")
      .def("__repr__", [](const R& r) {
        return "<FrameResult " + std::to_string(r.index) + (r.keyframe ? " keyframe " : " ") +
               std::to_string(r.width) + "x" + std::to_string(r.height) + ">";
      });
}

}  // namespace lingbot::python
