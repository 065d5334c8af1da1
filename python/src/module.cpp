// The extension module lingbot_map._core: the engine's errors as Python exceptions, and the
// bindings of the other files.
#include <pybind11/pybind11.h>

#include "bindings.h"
#include "lingbot/error.h"

namespace lingbot::python {
namespace {

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
  }
}

}  // namespace
}  // namespace lingbot::python

PYBIND11_MODULE(_core, m) {
  namespace lp = lingbot::python;
  m.doc() = "LingBot-Map engine: streaming 3D reconstruction, numpy in and out.";
  pybind11::register_exception_translator(&lp::translate);
  lp::bind_results(m);
  lp::bind_engine(m);
  lp::bind_batch(m);
  lp::bind_images(m);
  lp::bind_run(m);
  lp::bind_eval(m);
#ifdef LINGBOT_HAVE_CUDA
  m.attr("has_cuda") = true;
#else
  m.attr("has_cuda") = false;
#endif
}
