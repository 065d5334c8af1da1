// StreamServer: the HTTP routes of `lingbot-map serve` on the shared net/ layer, one network
// thread (an io_context) for every socket, and a worker thread per session (serve/worker.h).
#include "lingbot/server.h"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <thread>

#include "lingbot/error.h"
#include "lingbot/lingbot_c.h"
#include "lingbot/preflight.h"
#include "net/http.h"
#include "serve/connection.h"
#include "serve/context.h"
#ifdef LINGBOT_SERVE_VIEW
#include "viewer/live_views.h"
#endif

namespace lingbot {

using namespace net;  // beast, http, websocket, asio, tcp
using serve::StreamConnection;

namespace {

// Streams waiting for their start message beyond the admitted ones are refused at the handshake.
constexpr size_t kExtraConnections = 16;
// How long stop() lets the clients answer the server's close before dropping their sockets.
constexpr auto kCloseGrace = std::chrono::seconds(2);

// Compares without an early exit, so the time taken does not tell how much of a guess was right
// (it depends on the guess's length only). `secret` is not empty.
bool same_secret(std::string_view guess, std::string_view secret) {
  unsigned diff = guess.size() != secret.size();
  for (size_t i = 0; i < guess.size(); ++i)
    diff |= static_cast<unsigned char>(guess[i]) ^
            static_cast<unsigned char>(secret[i % secret.size()]);
  return diff == 0;
}

}  // namespace

struct StreamServer::Impl {
  explicit Impl(ServerOptions o) : options(std::move(o)) {}

  // On the network thread.
  void route(const std::shared_ptr<HttpSession>& http, Request&& req) {
    const std::string_view path = path_of(req);
    const auto text = [&](http::status s, std::string_view body, bool keep = true) {
      http->respond(req, s, "text/plain", body, keep);
    };
    if (path == "/healthz") return text(http::status::ok, "ok\n");
#ifdef LINGBOT_SERVE_VIEW
    // The viewer's page is the program's own, the same for everyone: no token needed for it.
    if (views && !websocket::is_upgrade(req) && views->route(http, req)) return;
#endif
    if (!authorized(req)) {
      log_refusal(*http, path, "missing or wrong token (401)");
      return text(http::status::unauthorized, "missing or wrong token\n", false);
    }
#ifdef LINGBOT_SERVE_VIEW
    if (views && websocket::is_upgrade(req) && views->route(http, req)) return;
#endif
    if (websocket::is_upgrade(req)) {
      if (path != "/v1/stream") return text(http::status::not_found, "not found\n");
      std::erase_if(streams, [](const auto& w) { return w.expired(); });
      if (streams.size() >= size_t(options.max_sessions) + kExtraConnections) {
        log_refusal(*http, path,
                    "too many connections (503): " + std::to_string(streams.size()) + " open");
        ctx->metrics.ended("", serve::Outcome::Refused);
        return text(http::status::service_unavailable, "too many connections\n");
      }
      auto c = std::make_shared<StreamConnection>(http->release_socket(), *ctx);
      streams.push_back(c);
      return c->start(std::move(req));
    }
    if (path == "/metrics")
      return http->respond(req, http::status::ok, "text/plain; version=0.0.4; charset=utf-8",
                           ctx->metrics.prometheus(ctx->admission.devices()));
    if (path == "/v1/info") return http->respond(req, http::status::ok, "application/json", info());
    text(http::status::not_found, "not found\n");
  }

  // One line per connection refused before it became a stream: what operations look for.
  static void log_refusal(const HttpSession& http, std::string_view path, const std::string& why) {
    std::fprintf(stderr, "serve: refused %.*s from %s: %s\n", int(path.size()), path.data(),
                 http.peer().c_str(), why.c_str());
  }

  bool authorized(const Request& req) const {
    if (options.token.empty()) return true;
    const beast::string_view field = req[http::field::authorization];
    const std::string_view auth(field.data(), field.size());
    if (auth.starts_with("Bearer ")) return same_secret(auth.substr(7), options.token);
    return same_secret(query_param(req, "token"), options.token);
  }

  std::string info() const {
    const ModelInfo m = options.engines.front().engine->info();
    nlohmann::json devices = nlohmann::json::array(), sessions = nlohmann::json::array();
    for (const ServedDeviceStats& d : ctx->admission.devices())
      devices.push_back(
          {{"device", d.device},
           {"free_bytes", d.budget_bytes - std::min(d.budget_bytes, d.reserved_bytes)},
           {"reserved_bytes", d.reserved_bytes},
           {"sessions", d.sessions}});
    for (const serve::SessionInfo& s : ctx->metrics.sessions())
      sessions.push_back(
          {{"id", s.id}, {"device", s.device}, {"frames", s.frames}, {"fps", s.fps}});
    return nlohmann::json{{"version", lingbot_version()},
                          {"model",
                           {{"arch", m.arch},
                            {"dim", m.dim},
                            {"depth", m.depth},
                            {"heads", m.heads},
                            {"parameters", m.parameters},
                            {"compute", m.compute},
                            {"kv_cache", m.kv_cache}}},
                          {"devices", devices},
                          {"sessions", sessions}}
        .dump();
  }

  ServerOptions options;
  std::unique_ptr<serve::Context> ctx;  // made by start(), once the budgets are measured
  asio::io_context ioc{1};
  Listener listener{ioc, [this](const std::shared_ptr<HttpSession>& http, Request&& req) {
                      route(http, std::move(req));
                    }};
  std::vector<std::weak_ptr<StreamConnection>> streams;  // network thread
#ifdef LINGBOT_SERVE_VIEW
  std::unique_ptr<viewer::LiveViews> views;  // serve --view
#endif
  std::thread thread;
};

StreamServer::StreamServer(ServerOptions o) {
  LINGBOT_CHECK_ARG(!o.engines.empty(), "serve: no engine to serve");
  for (const ServedEngine& e : o.engines) LINGBOT_CHECK_ARG(e.engine, "serve: a null engine");
  LINGBOT_CHECK_ARG(o.port >= 0 && o.port <= 65535,
                    "serve: port must be 0..65535, got " + std::to_string(o.port));
  LINGBOT_CHECK_ARG(o.max_sessions >= 1, "serve: max sessions must be >= 1");
  LINGBOT_CHECK_ARG(o.queue >= 1, "serve: the queue must hold at least 1 frame");
  LINGBOT_CHECK_ARG(o.start_timeout_s >= 1 && o.start_timeout_s <= 3600,
                    "serve: the start timeout must be 1 to 3600 s");
  LINGBOT_CHECK_ARG(o.stream_idle_timeout_s >= 1 && o.stream_idle_timeout_s <= 3600,
                    "serve: the stream idle timeout must be 1 to 3600 s");
  LINGBOT_CHECK_ARG(o.max_frame_bytes >= serve::kRawHeaderBytes,
                    "serve: max frame bytes too small");
  impl_ = std::make_unique<Impl>(std::move(o));
}

StreamServer::~StreamServer() {
  stop();
}

void StreamServer::start() {
  Impl& s = *impl_;
  LINGBOT_CHECK(!s.thread.joinable() && !s.ctx, "serve: already started");
  // What each device's sessions may reserve: what is free now, the weights being loaded.
  std::vector<serve::Admission::Device> budgets;
  for (const ServedEngine& e : s.options.engines) {
    size_t budget = s.options.memory_budget;
    if (!budget) budget = e.engine->device_memory_free();
    if (!budget) budget = host_memory_available();
    if (!budget) budget = SIZE_MAX / 4;  // unknown: only max_sessions limits
    budgets.push_back({e.options.device, budget});
  }
  s.ctx = std::make_unique<serve::Context>(s.options, std::move(budgets));
  if (s.options.view) {
#ifdef LINGBOT_SERVE_VIEW
    s.views = std::make_unique<viewer::LiveViews>(s.ioc.get_executor());
    s.ctx->open_view = [views = s.views.get()](const std::string& id, int64_t frames) {
      return views->open(id, frames);
    };
#else
    throw Error(
        "serve: this lingbot-map was built without the browser viewer (it needs "
        "web/viewer's npm packages at build time: run scripts/setup.sh, then build again)");
#endif
  }
  s.listener.listen(s.options.host, s.options.port, "serve", "--host");
  s.thread = std::thread([&s] { s.ioc.run(); });
}

int StreamServer::port() const {
  return impl_->listener.port();
}

std::string StreamServer::url() const {
  return net::url(impl_->options.host, impl_->listener.port());
}

ServerStats StreamServer::stats() const {
  if (!impl_->ctx) return {};
  ServerStats st = impl_->ctx->metrics.stats();
  st.devices = impl_->ctx->admission.devices();
  return st;
}

void StreamServer::stop() {
  Impl& s = *impl_;
  if (!s.thread.joinable()) return;
  const auto each_stream = [&s](auto f) {
    asio::post(s.ioc, [&s, f] {
      for (auto& w : s.streams)
        if (auto c = w.lock()) f(*c);
    });
  };
  asio::post(s.ioc, [&s] { s.listener.close(); });
  each_stream([](StreamConnection& c) { c.go_away(); });
#ifdef LINGBOT_SERVE_VIEW
  if (s.views) asio::post(s.ioc, [&s] { s.views->close_all(); });
#endif
  // The clients see the close (a client that reads nothing does not), then every socket goes.
  const auto deadline = std::chrono::steady_clock::now() + kCloseGrace;
  while (s.ctx->connections > 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  each_stream([](StreamConnection& c) { c.close(); });
  s.ctx->stop_workers();
  s.ioc.stop();
  s.thread.join();
}

}  // namespace lingbot
