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

// The frames of an [S, 3, H, W] or [1, S, 3, H, W] array (any dtype numpy can cast to float32,
// any strides: each frame is converted when it is pushed).
struct Frames {
  py::object frames;  // indexable by frame
  int64_t count = 0, height = 0, width = 0;
};

Frames frames_of(const py::handle& images) {
  py::array a = py::array::ensure(images);
  if (a && a.ndim() == 5 && a.shape(0) == 1) a = a[py::int_(0)].cast<py::array>();
  if (!a || a.ndim() != 4 || a.shape(1) != 3 || a.shape(0) < 1)
    throw py::value_error(
        "images must be a float array [S, 3, H, W] (or [1, S, 3, H, W]) with S >= 1");
  return {a, a.shape(0), a.shape(2), a.shape(3)};
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
  const Frames f = frames_of(images);
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
  std::unique_ptr<Session> session = e.engine->start(o);
  for (int64_t i = 0; i < S; ++i) {
    Tensor frame = frame_from_array(f.frames[py::int_(i)]);
    {
      py::gil_scoped_release release;
      session->push(frame, collect);
    }
    report(progress, i + 1, S);
  }
  {
    py::gil_scoped_release release;
    session->finish(collect);
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

py::dict inference_windowed(PyEngine& e, const py::handle& images, const StreamOptions& stream,
                            const WindowedOptions& o, const py::object& log) {
  const Frames f = frames_of(images);
  check_fits(e,
             {.height = f.height,
              .width = f.width,
              .frames = f.count,
              .stream = stream,
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
          return frame_from_array(f.frames[py::int_(i)]);
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
  const Preflight p = preflight(plan);
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
  engine.def(
      "inference_streaming",
      [](PyEngine& e, const py::handle& images, int num_scale_frames, int keyframe_interval,
         float flow_threshold, int window, int camera_iterations, bool cross_frame_special,
         bool camera_only, bool include_scale_frames, int max_non_keyframe_gap,
         int64_t max_special_frames, const py::object& progress) {
        const StreamOptions o =
            stream_options(num_scale_frames, window, keyframe_interval, camera_iterations,
                           cross_frame_special, camera_only, include_scale_frames, flow_threshold,
                           max_non_keyframe_gap, max_special_frames);
        return inference_streaming(e, images, o, progress);
      },
      py::arg("images"), py::arg("num_scale_frames") = 8, py::arg("keyframe_interval") = 1,
      py::arg("flow_threshold") = 0.0f, py::kw_only(), py::arg("window") = 64,
      py::arg("camera_iterations") = 4, py::arg("cross_frame_special") = true,
      py::arg("camera_only") = false, py::arg("include_scale_frames") = true,
      py::arg("max_non_keyframe_gap") = 30, py::arg("max_special_frames") = 0,
      py::arg("progress") = py::none(),
      "The reference's inference_streaming on images [S, 3, H, W] (or [1, S, 3, H, W]) in [0, 1].\n"
      "Returns {pose_enc [1, S, 9], depth [1, S, H, W, 1], depth_conf [1, S, H, W], images}.\n"
      "progress(done, total) is called after every frame. Raises MemoryError when the run\n"
      "cannot fit, before it starts.");
  engine.def(
      "inference_windowed",
      [](PyEngine& e, const py::handle& images, int window_size, const py::object& overlap_size,
         const py::object& overlap_keyframes, int num_scale_frames, int keyframe_interval,
         float flow_threshold, int max_non_keyframe_gap, int sliding_window, int camera_iterations,
         int64_t max_special_frames, const py::object& log) {
        if ((!overlap_size.is_none() && overlap_size.cast<int>() < 0) ||
            (!overlap_keyframes.is_none() && overlap_keyframes.cast<int>() < 0))
          throw py::value_error("overlaps must be >= 0");
        // Each window streams with these options; windowed_options carries them over.
        const StreamOptions stream = stream_options(
            num_scale_frames, sliding_window, keyframe_interval, camera_iterations, true, false,
            true, flow_threshold, max_non_keyframe_gap, max_special_frames);
        const WindowedOptions o = windowed_options(
            stream, window_size, overlap_size.is_none() ? -1 : overlap_size.cast<int>(),
            overlap_keyframes.is_none() ? -1 : overlap_keyframes.cast<int>());
        return inference_windowed(e, images, stream, o, log);
      },
      py::arg("images"), py::arg("window_size") = 64, py::arg("overlap_size") = py::none(),
      py::arg("overlap_keyframes") = py::none(), py::arg("num_scale_frames") = 8,
      py::arg("keyframe_interval") = 1, py::arg("flow_threshold") = 0.0f,
      py::arg("max_non_keyframe_gap") = 30, py::kw_only(), py::arg("sliding_window") = 64,
      py::arg("camera_iterations") = 4, py::arg("max_special_frames") = 0,
      py::arg("log") = py::none(),
      "The reference's inference_windowed: overlapping windows, each streamed with fresh caches,\n"
      "aligned by Sim(3) on their overlaps and stitched. Returns {pose_enc [1, S, 9], depth\n"
      "[1, S, H, W, 1], depth_conf, frame_type, is_keyframe, chunk_scales and chunk_transforms\n"
      "(two or more windows), alignment_mode, images}. log(line) receives a line per window.");
}

}  // namespace lingbot::python
