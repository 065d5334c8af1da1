// The C API (include/lingbot/lingbot_c.h): thin wrappers that turn every exception into a status
// and a thread-local message.
#include "lingbot/lingbot_c.h"

#include <cstdio>
#include <cstring>
#include <exception>
#include <memory>
#include <new>
#include <string>

#include "lingbot/engine.h"
#include "lingbot/error.h"

#ifndef LINGBOT_VERSION
#define LINGBOT_VERSION "unknown"
#endif

struct lingbot_engine {
  std::unique_ptr<lingbot::Engine> engine;
};

struct lingbot_session {
  std::unique_ptr<lingbot::Session> session;
};

namespace {

thread_local std::string g_last_error;

// Records the message (`where: what`, or `what` alone) as one line. Never throws: with no memory
// left for the message, the message is empty and the status still tells.
lingbot_status fail(lingbot_status status, const char* where, const char* what) noexcept {
  try {
    std::string message = where ? std::string(where) + ": " + what : std::string(what);
    for (char& c : message)
      if (c == '\n' || c == '\r') c = ' ';
    g_last_error = std::move(message);
  } catch (...) {
    g_last_error.clear();
  }
  return status;
}

// Runs `f`, mapping what it throws to a status. lingbot::Error messages already say what and
// where; the others get the name of the call.
template <class F>
lingbot_status guarded(const char* call, F&& f) noexcept {
  try {
    f();
    return LINGBOT_OK;
  } catch (const lingbot::Error& e) {
    return fail(LINGBOT_ERROR_FAILED, nullptr, e.what());
  } catch (const std::bad_alloc&) {
    return fail(LINGBOT_ERROR_OUT_OF_MEMORY, call, "out of memory");
  } catch (const std::exception& e) {
    return fail(LINGBOT_ERROR_INTERNAL, call, e.what());
  } catch (...) {
    return fail(LINGBOT_ERROR_INTERNAL, call, "unknown exception");
  }
}

lingbot_status invalid(const char* call, const char* what) noexcept {
  return fail(LINGBOT_ERROR_INVALID_ARGUMENT, call, what);
}

lingbot::Session::Callback to_callback(lingbot_result_callback cb, void* user_data) {
  if (!cb) return [](const lingbot::FrameResult&) {};
  return [cb, user_data](const lingbot::FrameResult& r) {
    lingbot_result c{};
    c.index = r.index;
    c.keyframe = r.keyframe ? 1 : 0;
    std::memcpy(c.pose_enc, r.pose_enc.data(), sizeof c.pose_enc);
    std::memcpy(c.c2w, r.c2w.data(), sizeof c.c2w);
    std::memcpy(c.w2c, r.w2c.data(), sizeof c.w2c);
    std::memcpy(c.intrinsics, r.intrinsics.data(), sizeof c.intrinsics);
    c.height = r.height;
    c.width = r.width;
    c.depth = r.depth.empty() ? nullptr : r.depth.data();
    c.confidence = r.confidence.empty() ? nullptr : r.confidence.data();
    cb(&c, user_data);
  };
}

}  // namespace

extern "C" {

const char* lingbot_version(void) {
  return LINGBOT_VERSION;
}

const char* lingbot_last_error(void) {
  return g_last_error.c_str();
}

const char* lingbot_status_name(lingbot_status status) {
  switch (status) {
    case LINGBOT_OK:
      return "LINGBOT_OK";
    case LINGBOT_ERROR_INVALID_ARGUMENT:
      return "LINGBOT_ERROR_INVALID_ARGUMENT";
    case LINGBOT_ERROR_FAILED:
      return "LINGBOT_ERROR_FAILED";
    case LINGBOT_ERROR_OUT_OF_MEMORY:
      return "LINGBOT_ERROR_OUT_OF_MEMORY";
    case LINGBOT_ERROR_INTERNAL:
      return "LINGBOT_ERROR_INTERNAL";
  }
  return "LINGBOT_ERROR_UNKNOWN";
}

lingbot_engine_options lingbot_engine_default_options(void) {
  const lingbot::EngineOptions d;
  lingbot_engine_options o{};
  o.model = nullptr;
  o.arch = nullptr;
  o.device = nullptr;
  o.precision = nullptr;
  o.threads = d.threads;
  return o;
}

lingbot_stream_options lingbot_stream_default_options(void) {
  const lingbot::StreamOptions d;
  lingbot_stream_options o{};
  o.scale_frames = d.scale_frames;
  o.window = d.window;
  o.keyframe_interval = d.keyframe_interval;
  o.camera_iterations = d.camera_iterations;
  o.cross_frame_special = d.cross_frame_special ? 1 : 0;
  o.camera_only = d.camera_only ? 1 : 0;
  o.include_scale_frames = d.include_scale_frames ? 1 : 0;
  o.flow_threshold = d.flow_threshold;
  o.max_non_keyframe_gap = d.max_non_keyframe_gap;
  o.max_special_frames = d.max_special_frames;
  return o;
}

lingbot_status lingbot_engine_create(const lingbot_engine_options* options, lingbot_engine** out) {
  if (!out) return invalid("lingbot_engine_create", "out is NULL");
  *out = nullptr;
  if (!options) return invalid("lingbot_engine_create", "options is NULL");
  return guarded("lingbot_engine_create", [&] {
    lingbot::EngineOptions o;
    if (options->model) o.model = options->model;
    if (options->arch) o.arch = options->arch;
    if (options->device) o.device = options->device;
    if (options->precision) o.precision = options->precision;
    o.threads = options->threads;
    auto e = std::make_unique<lingbot_engine>();
    e->engine = lingbot::Engine::create(o);
    *out = e.release();
  });
}

lingbot_status lingbot_engine_free(lingbot_engine* engine) {
  return guarded("lingbot_engine_free", [&] { delete engine; });
}

lingbot_status lingbot_session_start(lingbot_engine* engine, const lingbot_stream_options* options,
                                     lingbot_session** out) {
  if (!out) return invalid("lingbot_session_start", "out is NULL");
  *out = nullptr;
  if (!engine) return invalid("lingbot_session_start", "engine is NULL");
  return guarded("lingbot_session_start", [&] {
    const lingbot_stream_options c = options ? *options : lingbot_stream_default_options();
    lingbot::StreamOptions o;
    o.scale_frames = c.scale_frames;
    o.window = c.window;
    o.keyframe_interval = c.keyframe_interval;
    o.camera_iterations = c.camera_iterations;
    o.cross_frame_special = c.cross_frame_special != 0;
    o.camera_only = c.camera_only != 0;
    o.include_scale_frames = c.include_scale_frames != 0;
    o.flow_threshold = c.flow_threshold;
    o.max_non_keyframe_gap = c.max_non_keyframe_gap;
    o.max_special_frames = c.max_special_frames;
    auto s = std::make_unique<lingbot_session>();
    s->session = engine->engine->start(o);
    *out = s.release();
  });
}

lingbot_status lingbot_session_push(lingbot_session* session, const float* image, int channels,
                                    int height, int width, lingbot_result_callback on_result,
                                    void* user_data) {
  if (!session) return invalid("lingbot_session_push", "session is NULL");
  if (!image) return invalid("lingbot_session_push", "image is NULL");
  if (channels != 3 || height <= 0 || width <= 0) {
    char what[128];
    std::snprintf(what, sizeof what, "a frame must be float32 [3, H, W], got [%d, %d, %d]",
                  channels, height, width);
    return invalid("lingbot_session_push", what);
  }
  return guarded("lingbot_session_push", [&] {
    // A copy: the session keeps frames beyond this call (the scale frames until they are all
    // there), and the caller's buffer is only lent for the call.
    lingbot::Tensor frame = lingbot::Tensor::zeros({3, height, width});
    std::memcpy(frame.f32(), image, frame.nbytes());
    session->session->push(frame, to_callback(on_result, user_data));
  });
}

lingbot_status lingbot_session_flush(lingbot_session* session, lingbot_result_callback on_result,
                                     void* user_data) {
  if (!session) return invalid("lingbot_session_flush", "session is NULL");
  return guarded("lingbot_session_flush",
                 [&] { session->session->flush(to_callback(on_result, user_data)); });
}

lingbot_status lingbot_session_finish(lingbot_session* session, lingbot_result_callback on_result,
                                      void* user_data) {
  if (!session) return invalid("lingbot_session_finish", "session is NULL");
  return guarded("lingbot_session_finish",
                 [&] { session->session->finish(to_callback(on_result, user_data)); });
}

lingbot_status lingbot_session_reset(lingbot_session* session) {
  if (!session) return invalid("lingbot_session_reset", "session is NULL");
  return guarded("lingbot_session_reset", [&] { session->session->reset(); });
}

lingbot_status lingbot_session_free(lingbot_session* session) {
  return guarded("lingbot_session_free", [&] { delete session; });
}

lingbot_status lingbot_session_save(lingbot_session* session, const char* path) {
  if (!session) return invalid("lingbot_session_save", "session is NULL");
  if (!path || !*path) return invalid("lingbot_session_save", "path is NULL or empty");
  return guarded("lingbot_session_save", [&] { session->session->save(path); });
}

lingbot_status lingbot_session_resume(lingbot_engine* engine, const char* path,
                                      lingbot_session** out) {
  if (!out) return invalid("lingbot_session_resume", "out is NULL");
  *out = nullptr;
  if (!engine) return invalid("lingbot_session_resume", "engine is NULL");
  if (!path || !*path) return invalid("lingbot_session_resume", "path is NULL or empty");
  return guarded("lingbot_session_resume", [&] {
    auto s = std::make_unique<lingbot_session>();
    s->session = engine->engine->resume(path);
    *out = s.release();
  });
}

}  // extern "C"
