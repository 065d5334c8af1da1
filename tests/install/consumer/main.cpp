// Streams a few blank frames through the tiny synthetic model with the C++ API, then the same
// through the C API (c_api.c), and checks that every frame comes back. Where the package has
// the stream server or the viewer (LINGBOT_HAVE_SERVER / LINGBOT_HAVE_VIEWER, set by the
// package's target), it includes their headers and starts and stops each on a free port.
#include <lingbot/engine.h>
#ifdef LINGBOT_HAVE_SERVER
#include <lingbot/server.h>
#endif
#ifdef LINGBOT_HAVE_VIEWER
#include <lingbot/viewer.h>
#endif

#include <cmath>
#include <cstdio>
#include <vector>

extern "C" int run_c_api(void);

int main() {
  constexpr int kFrames = 3, kSize = 28;  // the tiny model needs sides that are multiples of 14
  const lingbot::EngineOptions options{.model = "synthetic:1", .arch = "tiny"};
  auto engine = lingbot::Engine::create(options);
  auto session = engine->start({.scale_frames = 2, .window = 4});
  std::vector<lingbot::FrameResult> results;
  auto collect = [&](const lingbot::FrameResult& r) { results.push_back(r); };
  for (int i = 0; i < kFrames; ++i)
    session->push(lingbot::Tensor::zeros({3, kSize, kSize}), collect);
  session->finish(collect);
  if (results.size() != kFrames) {
    std::fprintf(stderr, "consumer: %zu results for %d frames\n", results.size(), kFrames);
    return 1;
  }
  for (int i = 0; i < kFrames; ++i) {
    const lingbot::FrameResult& r = results[i];
    bool finite = true;
    for (float v : r.pose_enc) finite &= std::isfinite(v);
    if (r.index != i || r.height != kSize || r.width != kSize ||
        r.depth.size() != size_t{kSize * kSize} || !finite) {
      std::fprintf(stderr, "consumer: frame %d: bad result\n", i);
      return 1;
    }
  }
  std::printf("consumer: C++ API: %d frames, %s, frame 2 depth[0] %g\n", kFrames,
              engine->info().arch.c_str(), results[2].depth[0]);
#ifdef LINGBOT_HAVE_SERVER
  {
    lingbot::StreamServer server({.port = 0, .engines = {{engine.get(), options}}});
    server.start();
    std::printf("consumer: stream server on port %d\n", server.port());
    if (server.port() <= 0) return 1;
    server.stop();
  }
#endif
#ifdef LINGBOT_HAVE_VIEWER
  {
    lingbot::ViewerServer viewer({.port = 0});
    viewer.start();
    std::printf("consumer: viewer on port %d\n", viewer.port());
    if (viewer.port() <= 0) return 1;
    viewer.stop();
  }
#endif
  return run_c_api();
}
