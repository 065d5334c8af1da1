// The viewer's server: its page (net/http.h) and its browsers (viewer/browsers.h), all on one
// thread (an io_context run by the server's thread): every browser's state is touched only
// there, so it needs no locks. The producer reaches it through the Scene (a mutex held for a
// push_back) and a posted wake-up.
#include <atomic>
#include <filesystem>
#include <memory>
#include <thread>

#include "lingbot/error.h"
#include "lingbot/viewer.h"
#include "net/http.h"
#include "viewer/assets.h"
#include "viewer/browsers.h"
#include "viewer/scene.h"

namespace lingbot {

using namespace net;  // beast, http, websocket, asio, tcp
using viewer::Scene;

struct ViewerServer::Impl {
  explicit Impl(const ViewerOptions& o)
      : options(o),
        scene(std::make_shared<Scene>(viewer::SceneOptions{.points = o.points,
                                                           .initial_threshold = o.initial_threshold,
                                                           .image_width = o.image_width,
                                                           .max_bytes = o.max_bytes})) {}

  // On the io thread: the page and its assets, or a browser's WebSocket.
  void route(const std::shared_ptr<HttpSession>& http, Request&& req) {
    const std::string_view path = path_of(req);
    if (websocket::is_upgrade(req)) {
      if (path == "/ws")
        if (viewer::Hub::Slot slot = hub.take_slot(options.max_clients))
          return hub.accept(http->release_socket(), std::move(req), *scene, std::move(slot));
      return http->respond(
          req, path == "/ws" ? http::status::service_unavailable : http::status::not_found,
          "text/plain", path == "/ws" ? "too many viewers\n" : "not found\n");
    }
    if (const viewer::Asset* a = viewer::find_asset(path))
      return http->respond(req, http::status::ok, a->type, a->body);
    http->respond(req, http::status::not_found, "text/plain", "not found\n");
  }

  ViewerOptions options;
  std::shared_ptr<Scene> scene;  // shared with the sinks, which may outlive the server
  asio::io_context ioc{1};
  viewer::Hub hub{ioc.get_executor()};
  Listener listener{ioc, [this](const std::shared_ptr<HttpSession>& http, Request&& req) {
                      route(http, std::move(req));
                    }};
  std::thread thread;
};

namespace {

// The live feed of a run: encodes on the run's output thread for this sink, never waits for a
// browser.
class ViewerSink : public ResultSink {
 public:
  ViewerSink(std::shared_ptr<Scene> scene, int64_t expected) : scene_(std::move(scene)) {
    scene_->reset("live", expected);
  }
  void add(const FrameResult& r, const Tensor* rgb) override { scene_->add(r, rgb); }
  void finish() override { scene_->finish(); }
  std::string name() const override { return "viewer"; }

 private:
  std::shared_ptr<Scene> scene_;
};

}  // namespace

ViewerServer::ViewerServer(ViewerOptions options) : impl_(std::make_unique<Impl>(options)) {
  LINGBOT_CHECK_ARG(options.port >= 0 && options.port <= 65535,
                    "viewer port must be 0..65535, got " + std::to_string(options.port));
  LINGBOT_CHECK_ARG(options.points.stride >= 1, "viewer point stride must be >= 1");
  LINGBOT_CHECK_ARG(options.max_clients >= 1, "viewer max_clients must be >= 1");
}

ViewerServer::~ViewerServer() {
  stop();
}

void ViewerServer::start() {
  Impl& s = *impl_;
  LINGBOT_CHECK(!s.thread.joinable(), "viewer already started");
  s.listener.listen(s.options.host, s.options.port, "viewer", "--view-host");
  s.scene->on_change([hub = &s.hub] { hub->wake(); });
  s.thread = std::thread([&s] { s.ioc.run(); });
}

int ViewerServer::port() const {
  return impl_->listener.port();
}

std::string ViewerServer::url() const {
  return net::url(impl_->options.host, impl_->listener.port());
}

std::shared_ptr<ResultSink> ViewerServer::sink(int64_t expected_frames) {
  return std::make_shared<ViewerSink>(impl_->scene, expected_frames);
}

void ViewerServer::load(const RunResult& run, const FrameNamer& name) {
  Scene& scene = *impl_->scene;
  // The folder's name only: the browsers need no path of the server's.
  std::string name_shown = std::filesystem::path(run.dir).lexically_normal().filename().string();
  if (name_shown.empty())
    name_shown =
        std::filesystem::path(run.dir).lexically_normal().parent_path().filename().string();
  scene.reset(name_shown.empty() ? "result" : name_shown, static_cast<int64_t>(run.frames.size()));
  for (int64_t i = 0; i < run.size(); ++i) {
    const FrameResult f = result_frame(run, i);
    const std::optional<Tensor> rgb = read_result_image(run, i, name);
    scene.add(f, rgb ? &*rgb : nullptr);
  }
  scene.finish();
}

ViewerStats ViewerServer::stats() const {
  const Impl& s = *impl_;
  return {.frames = s.scene->frames(),
          .points = s.scene->points(),
          .bytes = s.scene->bytes(),
          .clients = s.hub.count(),
          .images_skipped = s.scene->images_skipped(),
          .bad_messages = s.hub.bad_messages,
          .thinning = s.scene->thinning()};
}

void ViewerServer::stop() {
  Impl& s = *impl_;
  s.scene->on_change({});  // sinks may live on; they no longer wake this server
  if (!s.thread.joinable()) return;
  asio::post(s.ioc, [&s] {
    s.listener.close();
    s.hub.close_all();
    s.ioc.stop();
  });
  s.thread.join();
}

}  // namespace lingbot
