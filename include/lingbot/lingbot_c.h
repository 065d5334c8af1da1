/* A flat C API over lingbot::Engine and lingbot::Session (lingbot/engine.h), for C programs and
 * for other languages' foreign-function interfaces. Valid C99 and C++.
 *
 * Usage:
 *
 *   #include <lingbot/lingbot_c.h>
 *
 *   static void on_result(const lingbot_result* r, void* user_data) {
 *     // r->depth and r->confidence point at r->height * r->width floats, valid only during
 *     // this call: copy what you keep.
 *     printf("frame %lld: camera at %f %f %f\n", (long long)r->index, r->c2w[3], r->c2w[7],
 *            r->c2w[11]);
 *   }
 *
 *   lingbot_engine_options eo = lingbot_engine_default_options();
 *   eo.model = "model.safetensors";
 *   lingbot_engine* engine = NULL;
 *   if (lingbot_engine_create(&eo, &engine) != LINGBOT_OK) {
 *     fprintf(stderr, "%s\n", lingbot_last_error());
 *     return 1;
 *   }
 *   lingbot_stream_options so = lingbot_stream_default_options();
 *   lingbot_session* session = NULL;
 *   lingbot_session_start(engine, &so, &session);
 *   for (each frame: float pixels[3][H][W], values in [0, 1], H and W multiples of 14)
 *     lingbot_session_push(session, pixels, 3, H, W, on_result, NULL);
 *   lingbot_session_finish(session, on_result, NULL);  // the results still outstanding
 *   lingbot_session_free(session);
 *   lingbot_engine_free(engine);
 *
 * Every call returns a status: LINGBOT_OK, or an error code with a one-line message in
 * lingbot_last_error(). No C++ exception leaves these functions. Results arrive in frame order
 * through the callback, within a push or a later push or finish (see Session::push). A session
 * must be freed before its engine. Sessions of one engine are independent: they may be pushed
 * alternately or each from its own thread; one session is used by one thread at a time.
 *
 * Conventions are those of lingbot/engine.h: pose_enc = [t (3), quaternion x y z w (4), fov_y,
 * fov_x]; c2w = [R | t] maps camera to world coordinates (OpenCV axes), w2c is its inverse; all
 * matrices are row-major; intrinsics are in pixels of the model input.
 */
#ifndef LINGBOT_LINGBOT_C_H
#define LINGBOT_LINGBOT_C_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum lingbot_status {
  LINGBOT_OK = 0,
  /* A null pointer where an object is needed, or a buffer shape that is not [3, H, W]. */
  LINGBOT_ERROR_INVALID_ARGUMENT = 1,
  /* The engine refused the request: a missing or bad model file, an unknown option, a frame of
   * the wrong size, ... (lingbot::Error); the message says what and what to do. */
  LINGBOT_ERROR_FAILED = 2,
  LINGBOT_ERROR_OUT_OF_MEMORY = 3,
  /* Anything else: a bug, or a failure of the system underneath. */
  LINGBOT_ERROR_INTERNAL = 4
} lingbot_status;

typedef struct lingbot_engine lingbot_engine;   /* a loaded model */
typedef struct lingbot_session lingbot_session; /* one stream of frames through an engine */

typedef struct lingbot_engine_options {
  const char* model;     /* checkpoint path (.safetensors, .pt) or "synthetic:SEED" */
  const char* arch;      /* "lingbot-map", "tiny", or NULL / "": inferred from the checkpoint */
  const char* device;    /* "cpu", "cuda" or "cuda:N"; NULL: "cpu" */
  const char* precision; /* "auto", "f32", "bf16" or "fp8"; NULL: "auto" */
  int threads;           /* CPU threads, 0 = all cores */
} lingbot_engine_options;

/* Fields as in lingbot::StreamOptions; flags are 0 or 1. */
typedef struct lingbot_stream_options {
  int scale_frames;      /* phase-1 frames, kept in the cache forever */
  int window;            /* sliding window of cached frames */
  int keyframe_interval; /* frames between keyframes; non-keyframes are not cached */
  int camera_iterations; /* camera-head refinement iterations */
  int cross_frame_special;
  int camera_only; /* no depth: lingbot_result.depth and .confidence are NULL */
  int include_scale_frames;
  float flow_threshold; /* > 0: flow-based adaptive keyframes; 0: keyframe_interval applies */
  int max_non_keyframe_gap;
  int64_t max_special_frames; /* > 0 bounds memory for endless streams; 0 = unbounded */
} lingbot_stream_options;

typedef struct lingbot_result {
  int64_t index; /* frame number in the sequence */
  int keyframe;  /* 1 if the frame was kept in the cache */
  float pose_enc[9];
  float c2w[12], w2c[12]; /* row-major 3x4 */
  float intrinsics[9];    /* row-major 3x3 */
  int height, width;
  /* [height * width] each, row-major; valid only during the callback; NULL when camera_only. */
  const float* depth;
  const float* confidence;
} lingbot_result;

/* Called once per frame; must not unwind (no longjmp out of it, no C++ exception). */
typedef void (*lingbot_result_callback)(const lingbot_result* result, void* user_data);

/* The library's version, "MAJOR.MINOR.PATCH". */
const char* lingbot_version(void);
/* The message of this thread's last failed call ("" if none failed yet). Successful calls leave
 * it as it is. Valid until the next failing call on this thread. */
const char* lingbot_last_error(void);
/* A constant name for a status: "LINGBOT_OK", ... */
const char* lingbot_status_name(lingbot_status status);

lingbot_engine_options lingbot_engine_default_options(void);
lingbot_stream_options lingbot_stream_default_options(void);

/* Loads the model; *out is the new engine, or NULL on failure. */
lingbot_status lingbot_engine_create(const lingbot_engine_options* options, lingbot_engine** out);
/* NULL is accepted. Free the engine's sessions first. */
lingbot_status lingbot_engine_free(lingbot_engine* engine);

/* options NULL: the defaults. *out is the new session, or NULL on failure. */
lingbot_status lingbot_session_start(lingbot_engine* engine, const lingbot_stream_options* options,
                                     lingbot_session** out);
/* image: float32 [channels = 3, height, width], row-major, values in [0, 1], copied before the
 * call returns. on_result may be NULL (results are then dropped). */
lingbot_status lingbot_session_push(lingbot_session* session, const float* image, int channels,
                                    int height, int width, lingbot_result_callback on_result,
                                    void* user_data);
/* Delivers every outstanding result, running what is still buffered. */
lingbot_status lingbot_session_finish(lingbot_session* session, lingbot_result_callback on_result,
                                      void* user_data);
/* Delivers the results of every frame pushed so far, waiting for the device; the sequence goes on
 * (for live sources slower than the device, whose results would otherwise wait for the next
 * push). */
lingbot_status lingbot_session_flush(lingbot_session* session, lingbot_result_callback on_result,
                                     void* user_data);
/* Starts a new sequence; results not yet delivered are dropped. */
lingbot_status lingbot_session_reset(lingbot_session* session);
/* NULL is accepted. */
lingbot_status lingbot_session_free(lingbot_session* session);

/* Writes the whole sequence to the file `path` (lingbot::Session::save): its caches in their
 * stored precision, counters, options, trajectory and the model's identity. The file is written
 * beside `path` and renamed over it once complete. A step still on the device is waited for; its
 * results come at the next push, flush or finish, as they would have. */
lingbot_status lingbot_session_save(lingbot_session* session, const char* path);
/* A new session continuing the one saved at `path` (lingbot::Engine::resume): frames pushed to it
 * get the results they would have got in the saved session, and their indices continue its.
 * LINGBOT_ERROR_FAILED, with the reason in lingbot_last_error(), for a file that is missing,
 * damaged, truncated or made with another model, architecture or precision. *out is the new
 * session, or NULL on failure. */
lingbot_status lingbot_session_resume(lingbot_engine* engine, const char* path,
                                      lingbot_session** out);

#ifdef __cplusplus
}
#endif

#endif /* LINGBOT_LINGBOT_C_H */
