// Image files and the reference's preprocessing: decode, resize/crop/pad, list a folder.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstring>
#include <string>

#include "bindings.h"
#include "lingbot/image.h"

namespace lingbot::python {

namespace {

PreprocessMode mode_of(const std::string& mode) {
  if (mode == "crop") return PreprocessMode::Crop;
  if (mode == "pad") return PreprocessMode::Pad;
  if (mode == "none") return PreprocessMode::None;
  throw py::value_error("unknown preprocessing mode '" + mode + "' (crop, pad or none)");
}

ImageU8 image_of(const py::handle& array) {
  auto a = py::array_t<uint8_t, py::array::c_style>::ensure(array);
  if (!a || a.ndim() != 3 || a.shape(2) != 3)
    throw py::value_error("an image must be uint8 [H, W, 3] (RGB)");
  ImageU8 img;
  img.height = static_cast<int>(a.shape(0));
  img.width = static_cast<int>(a.shape(1));
  img.rgb.assign(a.data(), a.data() + a.size());
  return img;
}

}  // namespace

void bind_images(py::module_& m) {
  m.def(
      "load_image",
      [](const py::handle& path) {
        const std::string p = path_arg(path);
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
        ImageU8 img = image_of(image);
        const PreprocessMode pm = mode_of(mode);
        Tensor chw;
        {
          py::gil_scoped_release release;
          chw = lingbot::preprocess(img, pm, size);
        }
        py::array_t<uint8_t> out({chw.dim(0), chw.dim(1), chw.dim(2)});
        std::memcpy(out.mutable_data(), chw.raw(), chw.nbytes());
        return out;
      },
      py::arg("image"), py::arg("mode") = "crop", py::arg("size") = 518,
      "The reference's preprocessing of one uint8 [H, W, 3] image, bit for bit: uint8 [3, H', "
      "W'].\n"
      "crop: width `size`, height centre-cropped to at most `size`; pad: longer side `size`,\n"
      "padded with white to size x size; none: unchanged (sides must be multiples of 14).");
  m.def(
      "list_images", [](const py::handle& folder) { return list_images(path_arg(folder)); },
      py::arg("folder"),
      "The .png/.jpg/.jpeg files in a folder, in natural order (2.png before 10.png).");
}

}  // namespace lingbot::python
