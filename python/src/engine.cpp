// Engine and Session: frames pushed one at a time, results returned as they become ready. The GIL
// is released while the engine computes, so other Python threads (a camera reader, a viewer) run.
#include "lingbot/engine.h"

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "bindings.h"

namespace lingbot::python {

namespace {

// A session and the engine it needs alive. One session is not thread-safe: `busy` serialises
// calls from several Python threads instead of letting them race.
struct PySession {
  std::shared_ptr<PyEngine> engine;
  std::unique_ptr<Session> session;
  std::mutex busy;
};

// Runs `step` (push or finish) without the GIL and hands back what it delivered.
template <class F>
py::list run_step(PySession& s, F&& step) {
  std::vector<FrameResult> done;
  {
    py::gil_scoped_release release;
    std::lock_guard<std::mutex> lock(s.busy);
    step([&](const FrameResult& r) { done.push_back(r); });
  }
  py::list out;
  for (FrameResult& r : done) out.append(py::cast(std::make_shared<FrameResult>(std::move(r))));
  return out;
}

}  // namespace

py::dict stats_dict(const CacheStats& c) {
  py::dict d;
  // The reference counts frames appended to the cache (keyframes, evicted ones included): our
  // stored_frames, kept under its own name too.
  d["frame_count"] = c.stored_frames;
  d["scale_pages"] = c.scale_pages;
  d["live_pages"] = c.live_pages;
  d["free_pages"] = c.free_pages;
  d["special_tokens"] = c.special_tokens;
  d["stored_frames"] = c.stored_frames;
  d["special_frames"] = c.special_frames;
  d["layers"] = c.layers;
  d["bytes"] = c.bytes;
  d["bytes_reserved"] = c.bytes_reserved;
  d["camera_cache_bytes"] = c.camera_cache_bytes;
  d["camera_cache_bytes_reserved"] = c.camera_cache_bytes_reserved;
  return d;
}

namespace {

void reset(PySession& s) {
  py::gil_scoped_release release;
  std::lock_guard<std::mutex> lock(s.busy);
  s.session->reset();
}

py::dict session_stats(PySession& s) {
  CacheStats c;
  {
    py::gil_scoped_release release;
    std::lock_guard<std::mutex> lock(s.busy);
    c = s.session->cache_stats();
  }
  return stats_dict(c);
}

}  // namespace

std::string path_arg(const py::handle& path, const std::string& what) {
  if (!py::isinstance<py::str>(path) && !py::hasattr(path, "__fspath__"))
    throw py::type_error(what + " must be a path (str or os.PathLike), got " + describe(path));
  return py::str(py::module_::import("os").attr("fspath")(path));
}

StreamOptions stream_options(int scale_frames, int window, int keyframe_interval,
                             int camera_iterations, bool cross_frame_special, bool camera_only,
                             bool include_scale_frames, float flow_threshold,
                             int max_non_keyframe_gap, int64_t max_special_frames) {
  if (keyframe_interval < 1)
    throw py::value_error("keyframe_interval must be at least 1, got " +
                          std::to_string(keyframe_interval));
  StreamOptions o;
  o.scale_frames = scale_frames;
  o.window = window;
  o.keyframe_interval = keyframe_interval;
  o.camera_iterations = camera_iterations;
  o.cross_frame_special = cross_frame_special;
  o.camera_only = camera_only;
  o.include_scale_frames = include_scale_frames;
  o.flow_threshold = flow_threshold;
  o.max_non_keyframe_gap = max_non_keyframe_gap;
  o.max_special_frames = max_special_frames;
  return o;
}

void bind_engine(py::module_& m) {
  py::class_<PySession, std::shared_ptr<PySession>>(
      m, "Session",
      "One sequence streamed through an engine; from Engine.start. Sessions of one engine are "
      "independent (each owns its caches); one session must not be used from two threads at "
      "once (calls are serialised).")
      .def(
          "push",
          [](PySession& s, const py::handle& image) {
            Tensor frame = frame_from_array(image, "push: image");
            return run_step(s, [&](const Session::Callback& cb) { s.session->push(frame, cb); });
          },
          py::arg("image"),
          "Adds a frame: uint8 or float (in [0, 1]), [H, W, 3] or [3, H, W] (what load_image,\n"
          "preprocess and load_images return), sides multiples of 14.\n"
          "Returns the results ready so far, in frame order: the scale frames together once the\n"
          "last of them is pushed, then each frame within its own push or the next one.")
      .def(
          "finish",
          [](PySession& s) {
            return run_step(s, [&](const Session::Callback& cb) { s.session->finish(cb); });
          },
          "Returns every outstanding result (runs a sequence shorter than scale_frames).")
      .def(
          "flush",
          [](PySession& s) {
            return run_step(s, [&](const Session::Callback& cb) { s.session->flush(cb); });
          },
          "Returns the results of every frame pushed so far, waiting for the device; the\n"
          "sequence goes on. For live sources slower than the device, whose results would\n"
          "otherwise wait for the next push.")
      .def("reset", &reset,
           "Starts a new sequence: clears the caches; results not yet returned are dropped.")
      .def("clean_kv_cache", &reset, "The reference's name for reset().")
      .def("cache_stats", &session_stats,
           "The caches after the last frame returned: frame_count (frames stored, evicted ones\n"
           "included), scale_pages, live_pages, free_pages, special_tokens (the reference's\n"
           "get_cache_stats), then stored_frames (= frame_count), special_frames, layers and\n"
           "byte counts.")
      .def("get_cache_stats", &session_stats, "The reference's name for cache_stats().")
      .def(
          "save",
          [](PySession& s, const py::handle& path) {
            const std::string p = path_arg(path, "save: path");
            py::gil_scoped_release release;
            std::lock_guard<std::mutex> lock(s.busy);
            s.session->save(p);
          },
          py::arg("path"),
          "Writes the whole sequence to a file (a safetensors container) that Engine.resume\n"
          "continues exactly: caches in their stored precision, counters, options, trajectory\n"
          "and the model's identity. Written beside the path and renamed over it when complete.")
      .def(
          "trajectory",
          [](PySession& s) {
            std::vector<FrameResult> t;
            {
              py::gil_scoped_release release;
              std::lock_guard<std::mutex> lock(s.busy);
              t = s.session->trajectory();
            }
            py::list out;
            for (FrameResult& r : t)
              out.append(py::cast(std::make_shared<FrameResult>(std::move(r))));
            return out;
          },
          "The cameras of every frame returned so far (a resumed session's begin with the saved\n"
          "ones) as FrameResults without depth maps.");

  py::class_<PyEngine, std::shared_ptr<PyEngine>>(
      m, "Engine", "A loaded LingBot-Map model; sessions stream frames through it.")
      .def(py::init([](const py::handle& model, const py::object& arch, const std::string& device,
                       const std::string& precision, int threads) {
             auto e = std::make_shared<PyEngine>();
             e->options.model = path_arg(model, "Engine: model");
             e->options.arch = arch.is_none() ? "" : py::str(arch).cast<std::string>();
             e->options.device = device;
             e->options.precision = precision;
             e->options.threads = threads;
             py::gil_scoped_release release;
             e->engine = Engine::create(e->options);
             return e;
           }),
           py::arg("model"), py::arg("arch") = py::none(), py::arg("device") = "cpu",
           py::arg("precision") = "auto", py::arg("threads") = 0,
           "Loads a checkpoint (.pt, .safetensors) or makes synthetic weights "
           "(\"synthetic:SEED\").\n"
           "arch: \"lingbot-map\", \"tiny\" or None (from the checkpoint). device: \"cpu\" or "
           "\"cuda\".\nprecision: \"auto\" (f32 on the CPU; bf16 on the GPU, with the KV cache in "
           "e4m3), \"f32\", \"bf16\" (a bf16 KV cache too) or \"fp8\" (the KV "
           "cache in e4m3). threads: CPU threads, 0 = all.")
      .def(
          "start",
          [](const std::shared_ptr<PyEngine>& e, int scale_frames, int window,
             int keyframe_interval, int camera_iterations, bool cross_frame_special,
             bool camera_only, bool include_scale_frames, float flow_threshold,
             int max_non_keyframe_gap, int64_t max_special_frames) {
            auto s = std::make_shared<PySession>();
            s->engine = e;
            s->session = e->engine->start(
                stream_options(scale_frames, window, keyframe_interval, camera_iterations,
                               cross_frame_special, camera_only, include_scale_frames,
                               flow_threshold, max_non_keyframe_gap, max_special_frames));
            return s;
          },
          py::arg("scale_frames") = 8, py::arg("window") = 64, py::arg("keyframe_interval") = 1,
          py::arg("camera_iterations") = 4, py::kw_only(), py::arg("cross_frame_special") = true,
          py::arg("camera_only") = false, py::arg("include_scale_frames") = true,
          py::arg("flow_threshold") = 0.0f, py::arg("max_non_keyframe_gap") = 30,
          py::arg("max_special_frames") = 0,
          "Starts a sequence. scale_frames: frames run together first and kept forever; window:\n"
          "cached frames; keyframe_interval: frames between cached keyframes; flow_threshold > 0:\n"
          "adaptive keyframes (pixels of motion); max_special_frames > 0 bounds memory on "
          "endless streams.")
      .def(
          "resume",
          [](const std::shared_ptr<PyEngine>& e, const py::handle& path) {
            const std::string p = path_arg(path, "resume: path");
            auto s = std::make_shared<PySession>();
            s->engine = e;
            py::gil_scoped_release release;
            s->session = e->engine->resume(p);
            return s;
          },
          py::arg("path"),
          "A session continuing the one Session.save wrote: the frames pushed next get the\n"
          "results they would have got before the save, and their indices continue. Raises\n"
          "RuntimeError for a damaged, truncated or foreign file (another model, architecture\n"
          "or precision), FileNotFoundError for a missing one.")
      .def(
          "get_cache_stats", [](const PyEngine& e) { return stats_dict(e.last_stats); },
          "The caches as the last inference_streaming left them (the reference's\n"
          "get_cache_stats, with Session.cache_stats' keys); all zero before the first run and\n"
          "after clean_kv_cache. The run's caches themselves are freed when it returns.")
      .def(
          "clean_kv_cache", [](PyEngine& e) { e.last_stats = CacheStats{}; },
          "The reference's clean_kv_cache: inference_streaming starts from empty caches and frees\n"
          "them when it returns, so this only clears what get_cache_stats reports. (A Session\n"
          "has its own clean_kv_cache.)")
      .def_property_readonly("device", [](const PyEngine& e) { return e.options.device; })
      .def_property_readonly(
          "info",
          [](const PyEngine& e) {
            const ModelInfo i = e.engine->info();
            py::dict d;
            d["arch"] = i.arch;
            d["dim"] = i.dim;
            d["depth"] = i.depth;
            d["heads"] = i.heads;
            d["parameters"] = i.parameters;
            d["backend"] = i.backend;
            d["compute"] = i.compute;
            d["kv_cache"] = i.kv_cache;
            return d;
          },
          "arch, dim, depth, heads, parameters, backend, compute and kv_cache (the dtypes the "
          "precision resolved to: \"F32\", \"BF16\", \"F8_E4M3\").")
      .def(
          "device_memory_used", [](const PyEngine& e) { return e.engine->device_memory_used(); },
          "Device memory the process holds now (GPU; 0 on the CPU).")
      .def(
          "device_memory_free", [](const PyEngine& e) { return e.engine->device_memory_free(); },
          "Device memory still free (GPU; 0 = unknown, the CPU).")
      .def("__repr__", [](const PyEngine& e) {
        const ModelInfo i = e.engine->info();
        return "<Engine " + i.arch + " on " + i.backend + ">";
      });
}

}  // namespace lingbot::python
