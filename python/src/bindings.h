// What the binding files share: the engine as Python holds it, numpy <-> Tensor conversions and
// the module's pieces.
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <memory>
#include <stdexcept>
#include <string>

#include "lingbot/engine.h"
#include "lingbot/image.h"
#include "lingbot/preflight.h"

namespace lingbot::python {

namespace py = pybind11;

// An engine and the options it was made with (the preflight needs them).
struct PyEngine {
  EngineOptions options;
  std::unique_ptr<Engine> engine;
  // The caches of the last inference_streaming as it ended (its session is gone by then), for
  // get_cache_stats; clean_kv_cache empties it.
  CacheStats last_stats;
};

// Cache statistics as a dict: the reference's get_cache_stats keys (frame_count, scale_pages,
// live_pages, free_pages, special_tokens) first, then ours.
py::dict stats_dict(const CacheStats& c);

// A run the memory preflight refuses: raised as MemoryError.
struct WontFit : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Raises MemoryError when the run `plan` describes (its engine options taken from `e`) will not
// fit: in free device memory after loading (the weights already there count as available) or,
// on the CPU, in the host's available memory. The message suggests milder settings under the
// keyword names of Python (`scale` for the scale-frame count).
void check_fits(const PyEngine& e, RunPlan plan, const char* scale);

// A picture argument of the wrong kind (not an array, another dtype, no 3-channel axis): raised
// as lingbot_map.ImageError, a TypeError that is also a ValueError (what it was before).
struct BadArray : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// What an argument is, for error messages: "float64 [480, 640, 3]" for an array (never its
// values), the type name otherwise.
std::string describe(const py::handle& value);

// A model-input frame (float [3, H, W] in [0, 1]) from a picture: uint8 or any float dtype,
// [H, W, 3] or [3, H, W] (a [3, H, 3] array is taken as HWC when uint8, CHW when float), any
// strides; copied, so the array may change afterwards. `what` names the argument in errors
// ("push: image"). Raises BadArray for another kind of value, ValueError for sides that are not
// positive multiples of the patch size.
Tensor frame_from_array(const py::handle& image, const std::string& what);

// The same picture as uint8 [H, W, 3] (floats in [0, 1] rounded to the nearest byte), for the
// preprocessing, which works on bytes as the reference's PIL does.
ImageU8 image_from_array(const py::handle& image, const std::string& what);

// A path argument (str or os.PathLike) as a string; `what` names it in the TypeError for
// anything else ("Engine: model").
std::string path_arg(const py::handle& path, const std::string& what);

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
