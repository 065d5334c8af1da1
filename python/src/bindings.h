// What the binding files share: the engine as Python holds it, numpy <-> Tensor conversions and
// the module's pieces.
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <memory>
#include <stdexcept>
#include <string>

#include "lingbot/engine.h"
#include "lingbot/preflight.h"

namespace lingbot::python {

namespace py = pybind11;

// An engine and the options it was made with (the preflight needs them).
struct PyEngine {
  EngineOptions options;
  std::unique_ptr<Engine> engine;
};

// A run the memory preflight refuses: raised as MemoryError.
struct WontFit : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Raises MemoryError when the run `plan` describes (its engine options taken from `e`) will not
// fit: in free device memory after loading (the weights already there count as available) or,
// on the CPU, in the host's available memory. The message suggests milder settings under the
// keyword names of Python (`scale` for the scale-frame count).
void check_fits(const PyEngine& e, RunPlan plan, const char* scale);

// A model-input frame from a numpy array: float [3, H, W] in [0, 1] (any float dtype, any
// strides) or uint8 [H, W, 3]. Copied, so the array may change or go away afterwards. Raises
// ValueError for another dtype or shape, or sides that are not multiples of the patch size.
Tensor frame_from_array(const py::handle& image);

// A path argument (str or os.PathLike) as a string.
std::string path_arg(const py::handle& path);

// StreamOptions from the keyword arguments Engine.start and inference_streaming share; raises
// ValueError for a keyframe interval below 1 (the engine checks the rest).
StreamOptions stream_options(int scale_frames, int window, int keyframe_interval,
                             int camera_iterations, bool cross_frame_special, bool camera_only,
                             bool include_scale_frames, float flow_threshold,
                             int max_non_keyframe_gap, int64_t max_special_frames);

// A float32 numpy array of `shape` owning a copy of `data`.
py::array_t<float> to_array(const float* data, std::vector<py::ssize_t> shape);

void bind_results(py::module_& m);
void bind_engine(py::module_& m);
void bind_batch(py::module_& m);
void bind_images(py::module_& m);
void bind_run(py::module_& m);
void bind_eval(py::module_& m);

}  // namespace lingbot::python
