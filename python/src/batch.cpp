// The reference's whole-sequence drivers on a [S, 3, H, W] array: inference_streaming and
// inference_windowed, returning its dicts (batch dimension 1 included). The memory preflight
// runs first, so that a run that cannot fit raises MemoryError before its first frame.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cstdio>
#include <cstring>
#include <optional>
#include <string>

#include "bindings.h"
#include "lingbot/preflight.h"
#include "lingbot/windowed.h"

namespace lingbot::python {

namespace {

// The frames of an [S, 3, H, W] or [S, H, W, 3] array, or the same with a batch dimension of 1
// (uint8 or any float dtype, any strides: each frame is converted as push converts it, when it
// is pushed).
struct Frames {
  py::object frames;  // indexable by frame
  std::string what;   // "inference_streaming: images", for errors
  int64_t count = 0, height = 0, width = 0;
  Tensor frame(int64_t i) const {
    return frame_from_array(frames[py::int_(i)], what + "[" + std::to_string(i) + "]");
  }
};

Frames frames_of(const py::handle& images, const std::string& fn) {
  const std::string what = fn + ": images";
  // (A default-constructed py::array is an empty array, not a null handle: hence `found`.)
  py::array a;
  bool found = false;
  if (py::isinstance<py::array>(images)) {
    a = py::reinterpret_borrow<py::array>(images);
    found = true;
  } else if (py::isinstance<py::list>(images) || py::isinstance<py::tuple>(images)) {
    py::array stacked = py::array::ensure(images);  // a list of equal-sized frames
    if (stacked) {
      a = stacked;
      found = true;
    }
  }
  if (found && a.ndim() == 5 && a.shape(0) == 1) a = a[py::int_(0)].cast<py::array>();
  if (!found || a.ndim() != 4 || a.shape(0) < 1)
    throw BadArray(what + " must be frames [S, 3, H, W] or [S, H, W, 3] (or [1, S, ...]), " +
                   "S >= 1, got " + describe(found ? py::handle(a) : images));
  Frames f{a, what, a.shape(0)};
  const Tensor first = f.frame(0);  // checks dtype, layout and size once, before the preflight
  f.height = first.dim(1);
  f.width = first.dim(2);
  return f;
}

// An integer argument (int, numpy integer, anything with __index__), or `fallback` for None.
int int_arg(const py::object& value, const std::string& what, int fallback) {
  if (value.is_none()) return fallback;
  if (!PyIndex_Check(value.ptr()) || py::isinstance<py::bool_>(value))
    throw py::type_error(what + " must be an int or None, got " + describe(value));
  return py::int_(value).cast<int>();
}

// The reference's output_device moves its torch results; ours are numpy arrays in host memory
// whatever the engine's device, so only the host (or None) can be asked for.
void check_output_device(const py::object& device, const std::string& fn) {
  if (device.is_none()) return;
  const std::string d = py::str(device);  // "cpu" for torch.device("cpu") too
  if (d == "cpu" || d.rfind("cpu:", 0) == 0) return;
  throw py::value_error(fn + ": output_device '" + d +
                        "' is not available: results are numpy arrays in host memory (pass "
                        "None or \"cpu\")");
}

std::string gb(size_t bytes) {
  char s[32];
  std::snprintf(s, sizeof s, "%.1f GB", bytes / 1e9);
  return s;
}

// What would make the run fit, in the keyword arguments of the call (`scale` names the
// scale-frame count, which inference_streaming calls num_scale_frames).
std::string advice(const RunPlan& plan, size_t available, const char* scale) {
  const MilderSettings m = milder_settings(plan, available);
  std::string tries;
  auto suggest = [&](const std::string& name, const std::optional<int>& v) {
    if (v) tries += (tries.empty() ? "" : " or ") + name + "=" + std::to_string(*v);
  };
  suggest(plan.windowed ? "window_size" : "keyframe_interval",
          plan.windowed ? m.window_size : m.keyframe_interval);
  suggest(plan.windowed ? "sliding_window" : "window", m.window);
  if (!plan.windowed) suggest(scale, m.scale_frames);
  suggest("max_special_frames", m.max_special_frames);
  if (m.input_width) {  // the preprocessing width (load_images' or run's `size`)
    suggest("size", m.input_width);
    tries +=
        " (" + std::to_string(*m.input_width) + "x" + std::to_string(*m.input_height) + " input)";
  }
  return tries.empty() ? "no single setting fits" : "try " + tries;
}

// Calls progress(done, total) when given, and lets Ctrl-C interrupt a long run.
void report(const py::object& progress, int64_t done, int64_t total) {
  if (PyErr_CheckSignals() != 0) throw py::error_already_set();
  if (!progress.is_none()) progress(done, total);
}

py::dict inference_streaming(PyEngine& e, const py::handle& images, const StreamOptions& o,
                             const py::object& progress) {
  const Frames f = frames_of(images, "inference_streaming");
  // The returned arrays hold every frame's depth and confidence.
  check_fits(e,
             {.height = f.height,
              .width = f.width,
              .frames = f.count,
              .stream = o,
              .results = {.kept_maps = 2}},
             "num_scale_frames");
  const int64_t S = f.count, H = f.height, W = f.width, plane = H * W;
  py::array_t<float> pose({int64_t(1), S, int64_t(9)});
  py::array_t<float> depth({int64_t(1), S, H, W, int64_t(1)}), conf({int64_t(1), S, H, W});
  float *pp = pose.mutable_data(), *dp = depth.mutable_data(), *cp = conf.mutable_data();
  int64_t delivered = 0;
  auto collect = [&](const FrameResult& r) {  // runs without the GIL: plain memory only
    std::memcpy(pp + r.index * 9, r.pose_enc.data(), 9 * sizeof(float));
    std::memcpy(dp + r.index * plane, r.depth.data(), plane * sizeof(float));
    std::memcpy(cp + r.index * plane, r.confidence.data(), plane * sizeof(float));
    ++delivered;
  };
  e.last_stats = CacheStats{};  // the reference's run starts with clean_kv_cache
  std::unique_ptr<Session> session = e.engine->start(o);
  for (int64_t i = 0; i < S; ++i) {
    Tensor frame = f.frame(i);
    {
      py::gil_scoped_release release;
      session->push(frame, collect);
    }
    report(progress, i + 1, S);
  }
  {
    py::gil_scoped_release release;
    session->finish(collect);
    e.last_stats = session->cache_stats();
  }
  if (delivered != S)
    throw std::runtime_error("the session returned " + std::to_string(delivered) + " of " +
                             std::to_string(S) + " frames");
  py::dict out;
  out["pose_enc"] = pose;
  out["depth"] = depth;
  out["depth_conf"] = conf;
  out["images"] = images;
  return out;
}

// A [1, ...] numpy copy of a result tensor.
template <class T>
py::array batched(const Tensor& t) {
  std::vector<py::ssize_t> shape{1};
  for (int64_t d : t.shape()) shape.push_back(d);
  py::array_t<T> out(shape);
  std::memcpy(out.mutable_data(), t.raw(), t.nbytes());
  return out;
}

py::dict inference_windowed(PyEngine& e, const py::handle& images, const WindowedOptions& o,
                            const py::object& log) {
  const Frames f = frames_of(images, "inference_windowed");
  check_fits(e,
             {.height = f.height,
              .width = f.width,
              .frames = f.count,
              .stream = o.stream,
              .windowed = o,
              // The stitched depth and confidence, then their numpy copies one at a time.
              .results = {.kept_maps = 3, .windowed = true}},
             "num_scale_frames");
  WindowedResult r;
  {
    py::gil_scoped_release release;
    r = run_windowed(
        *e.engine, f.count,
        [&](int64_t i) {
          py::gil_scoped_acquire gil;
          if (PyErr_CheckSignals() != 0) throw py::error_already_set();
          return f.frame(i);
        },
        o,
        [&](const char* line) {
          py::gil_scoped_acquire gil;
          if (!log.is_none()) log(line);
        });
  }
  const int64_t S = f.count, H = f.height, W = f.width;
  py::dict out;
  out["pose_enc"] = batched<float>(r.pose_enc);
  out["depth"] = batched<float>(r.depth).attr("reshape")(1, S, H, W, 1);
  out["depth_conf"] = batched<float>(r.depth_conf);
  out["frame_type"] = batched<uint8_t>(r.frame_type);
  out["is_keyframe"] = batched<bool>(r.is_keyframe);
  if (r.windows.size() > 1) {
    out["chunk_scales"] = batched<float>(r.chunk_scales);
    out["chunk_transforms"] = batched<float>(r.chunk_transforms);
  }
  out["alignment_mode"] = "scaled";
  out["images"] = images;
  return out;
}

}  // namespace

void check_fits(const PyEngine& e, RunPlan plan, const char* scale) {
  plan.engine = e.options;
  plan.results.on_host = e.options.device == "cpu";
  const Preflight p = preflight(plan, /*with_time=*/false);
  const std::string what = "not enough memory for " + std::to_string(plan.frames) + " frames at " +
                           std::to_string(plan.width) + "x" + std::to_string(plan.height);
  const size_t host = host_memory_available();
  if (!plan.results.on_host && host && p.need.results > host)
    throw WontFit(what + ": the results kept on the host need ~" + gb(p.need.results) + ", " +
                  gb(host) + " available");
  const size_t free = plan.results.on_host ? host : e.engine->device_memory_free();
  const size_t available = free ? free + p.need.weights : 0;
  if (available && p.need.total > available)
    throw WontFit(what + ": needs ~" + gb(p.need.total) + ", " + gb(available) + " available; " +
                  advice(plan, available, scale));
}

void bind_batch(py::module_& m) {
  py::class_<PyEngine, std::shared_ptr<PyEngine>> engine =
      m.attr("Engine").cast<py::class_<PyEngine, std::shared_ptr<PyEngine>>>();
  // The reference's positional order (images, num_scale_frames, keyframe_interval,
  // output_device, flow_threshold, max_non_keyframe_gap), then ours by keyword.
  engine.def(
      "inference_streaming",
      [](PyEngine& e, const py::handle& images, const py::object& num_scale_frames,
         int keyframe_interval, const py::object& output_device, float flow_threshold,
         int max_non_keyframe_gap, int window, int camera_iterations, bool cross_frame_special,
         bool camera_only, bool include_scale_frames, int64_t max_special_frames,
         const py::object& progress) {
        check_output_device(output_device, "inference_streaming");
        const StreamOptions o = stream_options(
            int_arg(num_scale_frames, "inference_streaming: num_scale_frames",
                    StreamOptions{}.scale_frames),
            window, keyframe_interval, camera_iterations, cross_frame_special, camera_only,
            include_scale_frames, flow_threshold, max_non_keyframe_gap, max_special_frames);
        return inference_streaming(e, images, o, progress);
      },
      py::arg("images"), py::arg("num_scale_frames") = py::none(), py::arg("keyframe_interval") = 1,
      py::arg("output_device") = py::none(), py::arg("flow_threshold") = 0.0f,
      py::arg("max_non_keyframe_gap") = 30, py::kw_only(), py::arg("window") = 64,
      py::arg("camera_iterations") = 4, py::arg("cross_frame_special") = true,
      py::arg("camera_only") = false, py::arg("include_scale_frames") = true,
      py::arg("max_special_frames") = 0, py::arg("progress") = py::none(),
      "The reference's inference_streaming on images [S, 3, H, W] or [S, H, W, 3] (uint8, or\n"
      "float in [0, 1]; a leading batch dimension of 1 is accepted). num_scale_frames None = 8.\n"
      "output_device: None or \"cpu\" (results are numpy arrays in host memory either way).\n"
      "flow_threshold > 0: adaptive keyframes (pixels of motion), at least every\n"
      "max_non_keyframe_gap frames. Returns {pose_enc [1, S, 9], depth [1, S, H, W, 1],\n"
      "depth_conf [1, S, H, W], images} (float32 numpy arrays; images as given).\n"
      "progress(done, total) is called after every frame. Raises MemoryError when the run\n"
      "cannot fit, before it starts.");
  engine.def(
      "inference_windowed",
      [](PyEngine& e, const py::handle& images, int window_size, const py::object& overlap_size,
         const py::object& overlap_keyframes, const py::object& num_scale_frames,
         const std::string& scale_mode, const py::object& output_device, int keyframe_interval,
         float flow_threshold, int max_non_keyframe_gap, int sliding_window, int camera_iterations,
         int64_t max_special_frames, const py::object& log) {
        check_output_device(output_device, "inference_windowed");
        // The reference accepts these and always aligns by the median depth ratio, as ours does.
        if (scale_mode != "median" && scale_mode != "trimmed_mean" && scale_mode != "median_all" &&
            scale_mode != "trimmed_mean_all")
          throw py::value_error("inference_windowed: unknown scale_mode '" + scale_mode +
                                "' (median; trimmed_mean, median_all and trimmed_mean_all are "
                                "accepted and align by the median too, as in the reference)");
        const int overlap = int_arg(overlap_size, "inference_windowed: overlap_size", -1);
        const int overlap_kf =
            int_arg(overlap_keyframes, "inference_windowed: overlap_keyframes", -1);
        if ((!overlap_size.is_none() && overlap < 0) ||
            (!overlap_keyframes.is_none() && overlap_kf < 0))
          throw py::value_error("overlaps must be >= 0");
        // Each window streams with these options (sliding_window is the stream's window).
        const StreamOptions stream =
            stream_options(int_arg(num_scale_frames, "inference_windowed: num_scale_frames",
                                   StreamOptions{}.scale_frames),
                           sliding_window, keyframe_interval, camera_iterations, true, false, true,
                           flow_threshold, max_non_keyframe_gap, max_special_frames);
        const WindowedOptions o{.window_size = window_size,
                                .overlap = overlap,
                                .overlap_keyframes = overlap_kf,
                                .stream = stream};
        return inference_windowed(e, images, o, log);
      },
      py::arg("images"), py::arg("window_size") = 64, py::arg("overlap_size") = py::none(),
      py::arg("overlap_keyframes") = py::none(), py::arg("num_scale_frames") = py::none(),
      py::arg("scale_mode") = "median", py::arg("output_device") = py::none(),
      py::arg("keyframe_interval") = 1, py::arg("flow_threshold") = 0.0f,
      py::arg("max_non_keyframe_gap") = 30, py::kw_only(), py::arg("sliding_window") = 64,
      py::arg("camera_iterations") = 4, py::arg("max_special_frames") = 0,
      py::arg("log") = py::none(),
      "The reference's inference_windowed (its positional order): overlapping windows, each\n"
      "streamed with fresh caches, aligned by Sim(3) on their overlaps and stitched. images and\n"
      "output_device as inference_streaming. Returns {pose_enc [1, S, 9], depth\n"
      "[1, S, H, W, 1], depth_conf, frame_type, is_keyframe, chunk_scales and chunk_transforms\n"
      "(two or more windows), alignment_mode, images}. log(line) receives a line per window.");
}

}  // namespace lingbot::python
