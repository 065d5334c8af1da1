// `lingbot-map view RESULT_DIR`: a finished run in the browser viewer; and the viewer options
// that `run --view` shares. Without the viewer built in, both say so in one line.
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <thread>

#include "commands.h"
#include "lingbot/error.h"
#include "lingbot/result.h"
#include "lingbot/viewer.h"
#include "viewer_args.h"

namespace lingbot::cli {
namespace {

struct ViewArgs {
  std::string dir;
  ViewerArgs viewer;
  float conf_threshold = 1.5f;
  int point_stride = 4;
};

#ifdef LINGBOT_HAVE_VIEWER
std::atomic<bool> g_quit{false};
extern "C" void on_quit(int) {
  g_quit = true;
}
#endif

int view(const ViewArgs& a) {
  const RunResult run = read_result(a.dir);  // a missing or broken folder fails before binding
  auto server =
      start_viewer(a.viewer, {.conf_threshold = 1.0f, .stride = a.point_stride}, a.conf_threshold);
#ifdef LINGBOT_HAVE_VIEWER
  server->load(run, result_image_names(run));
  const ViewerStats s = server->stats();
  std::fprintf(stderr, "viewer: %lld frames, %lld points from %s\n",
               static_cast<long long>(s.frames), static_cast<long long>(s.points), a.dir.c_str());
  serve_until_interrupted(*server);
#endif
  return 0;
}

}  // namespace

void add_viewer_options(CLI::App* sub, ViewerArgs& a) {
  sub->add_option("--port", a.port, "viewer: HTTP port (0 = any free port)")
      ->capture_default_str()
      ->check(CLI::Range(0, 65535));
  sub->add_option("--view-host", a.host,
                  "viewer: address to listen on (0.0.0.0 serves other machines too)")
      ->capture_default_str();
}

#ifdef LINGBOT_HAVE_VIEWER
std::shared_ptr<ViewerServer> start_viewer(const ViewerArgs& a, const PointOptions& points,
                                           float initial_threshold) {
  auto server = std::make_shared<ViewerServer>(ViewerOptions{
      .host = a.host, .port = a.port, .points = points, .initial_threshold = initial_threshold});
  server->start();
  std::fprintf(stderr, "viewer: %s\n", server->url().c_str());
  return server;
}

std::shared_ptr<ResultSink> viewer_sink(ViewerServer& server, int64_t expected_frames) {
  return server.sink(expected_frames);
}

void serve_until_interrupted(const ViewerServer& server) {
  std::signal(SIGINT, on_quit);
  std::signal(SIGTERM, on_quit);
  std::fprintf(stderr, "viewer: serving %s until Ctrl-C\n", server.url().c_str());
  while (!g_quit) std::this_thread::sleep_for(std::chrono::milliseconds(100));
}
#else
std::shared_ptr<ViewerServer> start_viewer(const ViewerArgs&, const PointOptions&, float) {
  throw Error(
      "this lingbot-map was built without the browser viewer (it needs Boost headers "
      "and web/viewer's npm packages at build time: run scripts/setup.sh, then build "
      "again)");
}
std::shared_ptr<ResultSink> viewer_sink(ViewerServer&, int64_t) {
  return nullptr;
}
void serve_until_interrupted(const ViewerServer&) {}
#endif

void add_view(CLI::App& app) {
  auto a = std::make_shared<ViewArgs>();
  CLI::App* sub = app.add_subcommand("view", "Show a finished run in the browser viewer");
  sub->add_option("RESULT_DIR", a->dir, "a run's output folder (predictions.safetensors, images/)")
      ->required();
  add_viewer_options(sub, a->viewer);
  sub->add_option("--conf-threshold", a->conf_threshold, "the confidence slider's starting value")
      ->capture_default_str();
  sub->add_option("--point-stride", a->point_stride, "points from every N-th pixel in x and y")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 16));
  commands().push_back({sub, [a] { return view(*a); }});
}

}  // namespace lingbot::cli
