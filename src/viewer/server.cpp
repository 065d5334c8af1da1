// The viewer's WebSocket side (the HTTP side is net/http.h's), all on one thread (an
// io_context run by the server's thread): every session's state is touched only there, so it
// needs no locks. The producer reaches it through the Scene (a mutex held for a push_back) and a
// posted wake-up.
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <deque>
#include <filesystem>
#include <memory>
#include <thread>

#include "lingbot/error.h"
#include "lingbot/viewer.h"
#include "net/http.h"
#include "viewer/assets.h"
#include "viewer/control.h"
#include "viewer/scene.h"

namespace lingbot {
namespace {

using namespace net;  // beast, http, websocket, asio, tcp
using viewer::Message;
using viewer::Scene;

constexpr size_t kMaxReplies = 8;  // pongs waiting; more pings than this are not answered
// Kernel send buffer per browser: bounds what a stalled one pins in the kernel, and lets the
// back-pressure (and so the skipping of stale images) start after a fraction of a second.
constexpr int kSendBuffer = 256 * 1024;

class WsSession;

// The browsers connected; on the server's thread only.
struct Hub {
  std::vector<std::weak_ptr<WsSession>> sessions;
  std::atomic<int64_t> count{0};  // read by stats() from any thread
  std::atomic<int64_t> bad_messages{0};
  void add(const std::shared_ptr<WsSession>& s);
  void pump_all();
  void close_all();
};

class WsSession : public std::enable_shared_from_this<WsSession> {
 public:
  WsSession(tcp::socket&& socket, Scene& scene, Hub& hub)
      : ws_(std::move(socket)), scene_(scene), hub_(hub) {}

  void start(http::request<http::empty_body> req) {
    beast::get_lowest_layer(ws_).expires_never();  // the websocket's own timeouts take over
    beast::error_code ignored;
    beast::get_lowest_layer(ws_).socket().set_option(
        asio::socket_base::send_buffer_size(kSendBuffer), ignored);
    ws_.set_option(websocket::stream_base::timeout::suggested(beast::role_type::server));
    ws_.read_message_max(viewer::kMaxControlBytes);
    ws_.async_accept(req, [self = shared_from_this()](beast::error_code ec) {
      if (ec) return;
      self->hub_.add(self);
      self->read();
      self->pump();
    });
  }

  // Sends the next message unless one is being sent: one write at a time, chosen when the last
  // completes, so a browser that stops reading just stops advancing its cursor.
  void pump() {
    if (writing_ || closed_) return;
    Message m;
    if (!replies_.empty()) {
      m = std::move(replies_.front());
      replies_.pop_front();
    } else {
      m = scene_.next(cursor_);
    }
    if (!m) return;
    writing_ = true;
    ws_.text(m.text);
    // The message's bytes are shared and immutable; the handler keeps them alive.
    ws_.async_write(asio::buffer(*m.data),
                    [self = shared_from_this(), m](beast::error_code ec, size_t) {
                      self->writing_ = false;
                      if (ec) {
                        self->closed_ = true;
                        return;
                      }
                      self->pump();
                    });
  }

  void close() {
    closed_ = true;
    beast::error_code ignored;
    beast::get_lowest_layer(ws_).socket().close(ignored);
  }

 private:
  void read() {
    ws_.async_read(in_, [self = shared_from_this()](beast::error_code ec, size_t) {
      if (ec) {  // closed, timed out, or longer than kMaxControlBytes (beast closes it)
        if (ec == websocket::error::message_too_big) self->reject("message too long");
        self->closed_ = true;
        return;
      }
      self->on_message();
    });
  }

  void on_message() {
    const std::string text = beast::buffers_to_string(in_.data());
    in_.consume(in_.size());
    viewer::Control c;
    try {
      c = viewer::parse_control(text);
    } catch (const Error& e) {
      reject(e.what());
      closed_ = true;  // no more writes; the close frame goes after the one in flight
      ws_.async_close(websocket::close_reason(websocket::close_code::policy_error, "bad message"),
                      [self = shared_from_this()](beast::error_code) {});
      return;
    }
    if (c.op == viewer::Control::Op::Ping) {
      if (replies_.size() < kMaxReplies)
        replies_.push_back({std::make_shared<const std::string>(
                                "{\"type\":\"pong\",\"id\":" + std::to_string(c.id) + "}"),
                            true});
    } else {
      cursor_.images = c.on;
    }
    pump();
    read();
  }

  void reject(const char* why) {
    ++hub_.bad_messages;
    std::fprintf(stderr, "viewer: closing a connection: %s\n", why);
  }

  websocket::stream<beast::tcp_stream> ws_;
  Scene& scene_;
  Hub& hub_;
  Scene::Cursor cursor_;
  beast::flat_buffer in_;
  std::deque<Message> replies_;
  bool writing_ = false, closed_ = false;
};

void Hub::add(const std::shared_ptr<WsSession>& s) {
  sessions.push_back(s);
  pump_all();  // also drops the sessions that have ended
}

void Hub::pump_all() {
  std::erase_if(sessions, [](const std::weak_ptr<WsSession>& w) { return w.expired(); });
  count = static_cast<int64_t>(sessions.size());
  for (auto& w : sessions)
    if (auto s = w.lock()) s->pump();
}

void Hub::close_all() {
  for (auto& w : sessions)
    if (auto s = w.lock()) s->close();
  sessions.clear();
  count = 0;
}

}  // namespace

struct ViewerServer::Impl {
  explicit Impl(const ViewerOptions& o)
      : options(o),
        scene(std::make_shared<Scene>(viewer::SceneOptions{.points = o.points,
                                                           .initial_threshold = o.initial_threshold,
                                                           .image_width = o.image_width,
                                                           .max_bytes = o.max_bytes})) {}

  // From any thread: wakes the writers once however many changes come before they run.
  void wake() {
    if (!wake_pending.exchange(true))
      asio::post(ioc, [this] {
        wake_pending = false;
        hub.pump_all();
      });
  }

  // On the io thread: the page and its assets, or a browser's WebSocket.
  void route(const std::shared_ptr<HttpSession>& http, Request&& req) {
    const std::string_view path = path_of(req);
    if (websocket::is_upgrade(req)) {
      if (path == "/ws" && hub.count < options.max_clients) {
        std::make_shared<WsSession>(http->release_socket(), *scene, hub)->start(std::move(req));
        return;
      }
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
  Hub hub;
  asio::io_context ioc{1};
  Listener listener{ioc, [this](const std::shared_ptr<HttpSession>& http, Request&& req) {
                      route(http, std::move(req));
                    }};
  std::atomic<bool> wake_pending{false};
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
  s.scene->on_change([impl = impl_.get()] { impl->wake(); });
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
          .clients = s.hub.count,
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
