/* The C API from C: the same stream as main.cpp. */
#include <lingbot/lingbot_c.h>
#include <stdio.h>
#include <stdlib.h>

enum { kFrames = 3, kSize = 28 };

static void on_result(const lingbot_result* r, void* user_data) {
  int* seen = (int*)user_data;
  if (r->index == *seen && r->height == kSize && r->width == kSize && r->depth) ++*seen;
}

int run_c_api(void) {
  lingbot_engine_options eo = lingbot_engine_default_options();
  lingbot_stream_options so = lingbot_stream_default_options();
  lingbot_engine* engine = NULL;
  lingbot_session* session = NULL;
  float* frame = (float*)calloc(3 * kSize * kSize, sizeof(float));
  int seen = 0, i;
  eo.model = "synthetic:1";
  eo.arch = "tiny";
  so.scale_frames = 2;
  so.window = 4;
  if (!frame || lingbot_engine_create(&eo, &engine) != LINGBOT_OK ||
      lingbot_session_start(engine, &so, &session) != LINGBOT_OK) {
    fprintf(stderr, "consumer: C API: %s\n", lingbot_last_error());
    return 1;
  }
  for (i = 0; i < kFrames; ++i)
    if (lingbot_session_push(session, frame, 3, kSize, kSize, on_result, &seen) != LINGBOT_OK)
      break;
  if (i < kFrames || lingbot_session_finish(session, on_result, &seen) != LINGBOT_OK) {
    fprintf(stderr, "consumer: C API: %s\n", lingbot_last_error());
    return 1;
  }
  lingbot_session_free(session);
  lingbot_engine_free(engine);
  free(frame);
  if (seen != kFrames) {
    fprintf(stderr, "consumer: C API: %d of %d frames came back\n", seen, kFrames);
    return 1;
  }
  printf("consumer: C API %s: %d frames\n", lingbot_version(), seen);
  return 0;
}
