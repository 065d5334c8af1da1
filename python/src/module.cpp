// The extension module lingbot_map._core: the engine's errors as Python exceptions, and the
// bindings of the other files.
#include <pybind11/pybind11.h>

#include "bindings.h"
#include "lingbot/device.h"
#include "lingbot/error.h"

namespace lingbot::python {
namespace {

// lingbot_map.ImageError: made at import, held for the life of the process.
PyObject* image_error = nullptr;

// lingbot::Error carries one line and a kind; Python code catches by exception type.
void translate(std::exception_ptr p) {
  try {
    if (p) std::rethrow_exception(p);
  } catch (const Error& e) {
    PyObject* type = PyExc_RuntimeError;
    if (e.kind() == ErrorKind::NotFound) type = PyExc_FileNotFoundError;
    if (e.kind() == ErrorKind::InvalidArgument) type = PyExc_ValueError;
    PyErr_SetString(type, e.what());
  } catch (const WontFit& e) {
    PyErr_SetString(PyExc_MemoryError, e.what());
  } catch (const BadArray& e) {
    PyErr_SetString(image_error, e.what());
  }
}

}  // namespace
}  // namespace lingbot::python

PYBIND11_MODULE(_core, m) {
  namespace lp = lingbot::python;
  m.doc() = "LingBot-Map engine: streaming 3D reconstruction, numpy in and out.";
  // Both bases: a picture of the wrong dtype or layout is a TypeError, and code written when it
  // was a ValueError still catches it.
  lp::image_error = PyErr_NewExceptionWithDoc(
      "lingbot_map.ImageError",
      "A picture argument that is not a uint8 or float array [H, W, 3] or [3, H, W].",
      pybind11::make_tuple(pybind11::handle(PyExc_TypeError), pybind11::handle(PyExc_ValueError))
          .ptr(),
      nullptr);
  if (!lp::image_error) throw pybind11::error_already_set();
  m.add_object("ImageError", pybind11::handle(lp::image_error));
  pybind11::register_exception_translator(&lp::translate);
  lp::bind_results(m);
  lp::bind_engine(m);
  lp::bind_batch(m);
  lp::bind_images(m);
  lp::bind_run(m);
  lp::bind_eval(m);
  // A usable GPU, not only a CUDA build: examples choose their default device with it.
  m.attr("has_cuda") = lingbot::usable_cuda_devices() > 0;
  m.attr("cuda_devices") = lingbot::usable_cuda_devices();
  m.attr("built_with_cuda") = lingbot::built_with_cuda();
}
