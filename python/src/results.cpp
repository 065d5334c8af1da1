// Results out: FrameResult with numpy views of its arrays.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cstring>
#include <memory>
#include <string>

#include "bindings.h"
#include "lingbot/image.h"

namespace lingbot::python {

namespace {

// A numpy view of a result's array; `owner` (the Python FrameResult) keeps it alive.
py::array_t<float> view(const py::object& owner, const float* data,
                        std::vector<py::ssize_t> shape) {
  return py::array_t<float>(shape, data, owner);
}

}  // namespace

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
      .def_readonly("optimized", &R::optimized,
                    "Which pose c2w, w2c and pose_enc hold: False, the stream's (what the model "
                    "said when the frame was computed); True, a loop-closed pose.")
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
