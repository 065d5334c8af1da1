// The CLI's `run` from Python: a folder, video, camera or URL through lingbot::run, with the same
// files written, and the results (and the frames the model saw) handed back for the reference
// demo's prediction dict (built in lingbot_map/__init__.py).
#include "lingbot/run.h"

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "bindings.h"
#include "lingbot/exports.h"
#include "lingbot/image.h"
#include "lingbot/loop_detect.h"
#include "lingbot/source.h"

namespace lingbot::python {

namespace {

PreprocessMode preprocess_mode(const std::string& m) {
  if (m == "crop") return PreprocessMode::Crop;
  if (m == "pad") return PreprocessMode::Pad;
  if (m == "none") return PreprocessMode::None;
  throw py::value_error("unknown preprocess mode '" + m + "' (crop, pad or none)");
}

template <class T>
T get(const py::dict& o, const char* key) {
  return o[key].cast<T>();
}

// lm.run's loop_options: the CLI's --loop-* knobs by the names of their fields.
void set_loop_options(const py::dict& knobs, LoopOptions& detect, LoopEdgeOptions& edge) {
  for (const auto& [key, value] : knobs) {
    const auto k = key.cast<std::string>();
    if (k == "min_gap")
      detect.min_gap = value.cast<int64_t>();
    else if (k == "top_k")
      detect.top_k = value.cast<int>();
    else if (k == "min_similarity")
      detect.min_similarity = value.cast<float>();
    else if (k == "min_inliers")
      detect.min_inliers = value.cast<int>();
    else if (k == "min_inlier_ratio")
      detect.min_inlier_ratio = value.cast<float>();
    else if (k == "max_rotation")
      edge.max_rotation_deg = value.cast<double>();
    else if (k == "max_epipolar")
      edge.max_epipolar_px = value.cast<double>();
    else
      throw py::value_error("loop_options: unknown '" + k +
                            "' (min_gap, top_k, min_similarity, min_inliers, min_inlier_ratio, "
                            "max_rotation, max_epipolar)");
  }
}

// Frames kept for the demo's `images`: one block per frame, stacked at the end.
struct Collected {
  std::vector<FrameResult> results;
  std::vector<float> images;
  int64_t height = 0, width = 0;
};

py::tuple run(PyEngine& e, const std::string& input, const std::string& out,
              const std::vector<std::string>& exports, const std::string& mode, const py::dict& o,
              const py::object& progress, const py::object& log) {
  if (mode != "streaming" && mode != "windowed")
    throw py::value_error("unknown mode '" + mode + "' (streaming or windowed)");
  const bool windowed = mode == "windowed";
  const PreprocessMode pm = preprocess_mode(get<std::string>(o, "preprocess"));
  const int size = get<int>(o, "size");
  if (size <= 0 || size % 14 != 0)
    throw py::value_error("size " + std::to_string(size) +
                          " is not a positive multiple of the patch size 14");
  StreamOptions stream = stream_options(
      get<int>(o, "scale_frames"), get<int>(o, "window"),
      std::max(1, get<int>(o, "keyframe_interval")), get<int>(o, "camera_iterations"), true, false,
      true, get<float>(o, "flow_threshold"), get<int>(o, "max_non_keyframe_gap"),
      get<int64_t>(o, "max_special_frames"));
  const WindowedOptions w{
      .window_size = get<int>(o, "window_size"),
      .overlap = get<int>(o, "overlap"),
      .overlap_keyframes = o["overlap_keyframes"].is_none() ? -1 : get<int>(o, "overlap_keyframes"),
      .stream = stream};

  SourceOptions in{.fps = get<double>(o, "fps"),
                   .stride = get<int>(o, "stride"),
                   .first_k = get<int64_t>(o, "first_k"),
                   .quiet = true};
  if (windowed) {  // as the CLI: windows step back over their overlap; the plan needs the length
    in.keep_recent =
        1 + std::max<int64_t>({w.overlap, w.stream.scale_frames,
                               int64_t{w.overlap_keyframes} * w.stream.keyframe_interval});
    in.exact_count = true;
  }
  const bool rotate = get<bool>(o, "rotate_clockwise_90");
  std::unique_ptr<FrameSource> source;
  {
    py::gil_scoped_release release;
    source = open_source(input, in, [=](const ImageU8& img) {
      return model_input(rotate ? rotate_clockwise_90(img) : img, pm, size);
    });
  }
  if (windowed && source->live())
    throw py::value_error("windowed mode needs a folder or a video file, not a live source");
  const int64_t frames =
      source->count() > 0 ? source->count() : int64_t{stream.scale_frames} + stream.window;
  // 0: the reference demo's rule (about 320 keyframes), as the CLI's default.
  // (Windowed runs keep an interval of 1 then, as `w` was made with.)
  if (get<int>(o, "keyframe_interval") == 0)
    stream.keyframe_interval = auto_keyframe_interval(frames);

  RunOptions ro{.stream = stream, .out_dir = out};
  if (windowed) ro.windowed = w;
  ro.exports.formats = exports;
  ro.exports.points = {.conf_threshold = get<float>(o, "conf_threshold"),
                       .stride = get<int>(o, "point_stride"),
                       .voxel = get<float>(o, "voxel")};
  ro.exports.depth.depth_scale = get<float>(o, "depth_scale");
  if (!o["cache_stats"].is_none())
    ro.cache_stats_path = path_arg(o["cache_stats"], "run: cache_stats");
  SkyMaskOptions sky;
  if (!o["mask_sky"].is_none()) sky.model = path_arg(o["mask_sky"], "run: mask_sky");
  if (!o["sky_mask_dir"].is_none()) sky.dir = path_arg(o["sky_mask_dir"], "run: sky_mask_dir");
  if (!o["sky_mask_visualization_dir"].is_none())
    sky.visualization_dir =
        path_arg(o["sky_mask_visualization_dir"], "run: sky_mask_visualization_dir");
  if (!sky.visualization_dir.empty() && sky.model.empty() && sky.dir.empty())
    throw py::value_error("sky_mask_visualization_dir needs mask_sky or sky_mask_dir");
  if (!sky.model.empty() || !sky.dir.empty()) ro.sky_mask = std::make_shared<SkyMasker>(sky);
  if (get<bool>(o, "loop_closure")) {
    if (!loop_detection_available())
      throw py::value_error("loop_closure: this build has no loop detection (OpenCV)");
    ro.loop = LoopOptions{};
    if (!o["loop_options"].is_none())
      set_loop_options(o["loop_options"].cast<py::dict>(), *ro.loop, ro.loop_edge);
  } else if (!o["loop_options"].is_none()) {
    throw py::value_error("loop_options without loop_closure");
  }
  if (!o["resume"].is_none()) {
    ro.resume = path_arg(o["resume"], "run: resume");
    const auto resume_mode = get<std::string>(o, "resume_mode");
    if (resume_mode != "continue" && resume_mode != "relocalize")
      throw py::value_error("unknown resume_mode '" + resume_mode + "' (continue or relocalize)");
    ro.relocalize = resume_mode == "relocalize";
  }
  if (!o["save_session"].is_none())
    ro.save_session = path_arg(o["save_session"], "run: save_session");

  if (get<bool>(o, "preflight")) {
    std::optional<Tensor> first;
    {
      py::gil_scoped_release release;
      first = source->get(0);
    }
    if (!first) throw py::value_error(input + ": has no frames");
    RunPlan plan{.height = first->dim(1),
                 .width = first->dim(2),
                 .frames = frames,
                 .stream = stream,
                 .results = export_outputs(ro.exports)};
    // Every frame's depth, confidence and image (3 maps) are returned, and the images copied
    // into one array at the end: 8 maps a frame.
    plan.results.kept_maps = 8;
    plan.results.recent_frames = in.keep_recent;
    if (windowed) plan.windowed = w;
    check_fits(e, plan, "scale_frames");
  }

  Collected c;
  bool interrupted = false;
  ro.on_result = [&](const FrameResult& r, const Tensor& frame) {
    c.results.push_back(r);
    if (frame.defined()) {
      c.height = frame.dim(1);
      c.width = frame.dim(2);
      const float* p = frame.f32();
      // Reserved for the whole run where its length is known: growing would hold up to twice it.
      if (c.images.empty() && source->count() > 0)
        c.images.reserve(static_cast<size_t>(source->count() * frame.numel()));
      c.images.insert(c.images.end(), p, p + frame.numel());
    }
    if (!progress.is_none()) {
      py::gil_scoped_acquire gil;
      progress(c.results.size(), source->count());
    }
  };
  ro.stop = [&] {  // Ctrl-C ends the input; the frames before it are written
    py::gil_scoped_acquire gil;
    if (PyErr_CheckSignals() != 0) {
      PyErr_Clear();
      interrupted = true;
    }
    return interrupted;
  };
  ro.log = [&](const char* line) {
    py::gil_scoped_acquire gil;
    if (!log.is_none()) log(line);
  };
  RunReport report;
  {
    py::gil_scoped_release release;
    report = lingbot::run(*e.engine, *source, ro);
  }
  if (interrupted) {
    PyErr_SetNone(PyExc_KeyboardInterrupt);
    throw py::error_already_set();
  }
  py::list results;
  for (FrameResult& r : c.results)
    results.append(py::cast(std::make_shared<FrameResult>(std::move(r))));
  const auto n = static_cast<py::ssize_t>(c.results.size());
  py::object images = py::none();
  if (n > 0 && c.images.size() == size_t(n) * 3 * c.height * c.width)
    images = to_array(c.images.data(), {n, 3, c.height, c.width});
  // What loop closure found and, where the pose graph ran, every frame's optimized pose.
  py::dict loops;
  if (report.loop_detection) {
    py::list found;
    for (const LoopClosure& l : report.loops)
      found.append(py::dict(py::arg("query") = l.query, py::arg("match") = l.match,
                            py::arg("similarity") = l.similarity,
                            py::arg("matches") = l.verification.matches,
                            py::arg("inliers") = l.verification.inliers));
    loops["loops"] = found;
  }
  if (!report.c2w_optimized.empty()) {
    const auto m = static_cast<py::ssize_t>(report.c2w_optimized.size());
    loops["c2w_optimized"] = to_array(report.c2w_optimized[0].data(), {m, 3, 4});
    loops["scale_optimized"] = to_array(report.scale_optimized.data(), {m});
  }
  return py::make_tuple(results, images, loops);
}

}  // namespace

void bind_run(py::module_& m) {
  m.def("_run", &run, py::arg("engine"), py::arg("input"), py::arg("out"), py::arg("exports"),
        py::arg("mode"), py::arg("options"), py::arg("progress"), py::arg("log"),
        "lingbot_map.run's engine side: (results, images).");
  m.def(
      "parse_export_list", [](const std::string& list) { return parse_export_list(list); },
      py::arg("list"),
      "\"tum,ply\", \"all\" or \"none\" as a list of export names; ValueError for an unknown one.");
}

}  // namespace lingbot::python
