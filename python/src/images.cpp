// Image files and the reference's preprocessing: decode, resize/crop/pad, list a folder.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "bindings.h"
#include "lingbot/image.h"
#include "lingbot/source.h"

namespace lingbot::python {

namespace {

PreprocessMode mode_of(const std::string& mode) {
  if (mode == "crop") return PreprocessMode::Crop;
  if (mode == "pad") return PreprocessMode::Pad;
  if (mode == "none") return PreprocessMode::None;
  throw py::value_error("unknown preprocessing mode '" + mode + "' (crop, pad or none)");
}

py::array_t<uint8_t> to_array(const Tensor& t) {
  py::array_t<uint8_t> out({t.dim(0), t.dim(1), t.dim(2)});
  std::memcpy(out.mutable_data(), t.raw(), t.nbytes());
  return out;
}

// A folder, video, camera or stream URL as its decoded pictures, uint8 [H, W, 3], sampled as
// the CLI does but not preprocessed (what a client sends to `lingbot-map serve`).
class Frames {
 public:
  Frames(const std::string& input, const SourceOptions& options) {
    py::gil_scoped_release release;
    source_ = open_source(input, options, [](const ImageU8& img) {
      auto rgb = std::make_shared<std::vector<uint8_t>>(img.rgb);
      return Tensor::wrap(rgb->data(), {img.height, img.width, 3}, DType::U8, rgb);
    });
  }
  py::array_t<uint8_t> next() {
    std::optional<Tensor> frame;
    {
      py::gil_scoped_release release;
      frame = source_->get(next_);
    }
    if (!frame) throw py::stop_iteration();
    ++next_;
    return to_array(*frame);
  }
  int64_t count() const { return source_->count(); }

 private:
  std::unique_ptr<FrameSource> source_;
  int64_t next_ = 0;
};

}  // namespace

void bind_images(py::module_& m) {
  py::class_<Frames>(m, "Frames",
                     "Iterates a folder, video file, camera or stream URL as uint8 [H, W, 3] RGB "
                     "pictures (read_frames).")
      .def("__iter__", [](Frames& f) -> Frames& { return f; })
      .def("__next__", &Frames::next)
      .def("__len__", &Frames::count, "Frames expected (0 = unknown, e.g. a live source).");
  m.def(
      "read_frames",
      [](const py::handle& input, double fps, int stride, int64_t first_k) {
        if (stride < 1) throw py::value_error("stride must be >= 1");
        return Frames(path_arg(input, "read_frames: input"),
                      {.fps = fps, .stride = stride, .first_k = first_k});
      },
      py::arg("input"), py::arg("fps") = 10.0, py::arg("stride") = 1, py::arg("first_k") = 0,
      "The pictures of a folder of images, a video file, a capture device or a stream URL, "
      "decoded but not preprocessed: uint8 [H, W, 3] RGB, sampled as the CLI samples them (fps: "
      "video files, 0 = every frame; stride; first_k: only the first K, 0 = all).");
  m.def(
      "load_image",
      [](const py::handle& path) {
        const std::string p = path_arg(path, "load_image: path");
        ImageU8 img;
        {
          py::gil_scoped_release release;
          img = load_image(p);
        }
        py::array_t<uint8_t> out({img.height, img.width, 3});
        std::memcpy(out.mutable_data(), img.rgb.data(), img.rgb.size());
        return out;
      },
      py::arg("path"),
      "Decodes a PNG or JPEG file to uint8 [H, W, 3] RGB as Pillow does (EXIF orientation "
      "applied, alpha composited as the reference's preprocessing does).");
  m.def(
      "preprocess",
      [](const py::handle& image, const std::string& mode, int size) {
        if (size <= 0 || size % 14 != 0)
          throw py::value_error("size " + std::to_string(size) +
                                " is not a positive multiple of the patch size 14");
        ImageU8 img = image_from_array(image, "preprocess: image");
        const PreprocessMode pm = mode_of(mode);
        Tensor chw;
        {
          py::gil_scoped_release release;
          chw = lingbot::preprocess(img, pm, size);
        }
        return to_array(chw);
      },
      py::arg("image"), py::arg("mode") = "crop", py::arg("size") = 518,
      "The reference's preprocessing of one picture, bit for bit: uint8 [3, H', W'] (which\n"
      "Session.push and the drivers take as it is). The picture: uint8, or float in [0, 1]\n"
      "(rounded to bytes first), [H, W, 3] or [3, H, W].\n"
      "crop: width `size`, height centre-cropped to at most `size`; pad: longer side `size`,\n"
      "padded with white to size x size; none: unchanged (sides must be multiples of 14).");
  m.def(
      "list_images",
      [](const py::handle& folder) { return list_images(path_arg(folder, "list_images: folder")); },
      py::arg("folder"),
      "The .png/.jpg/.jpeg files in a folder, in natural order (2.png before 10.png).");
}

}  // namespace lingbot::python
