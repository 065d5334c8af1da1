// `lingbot-map serve --model M`: the stream server. Loads the model once and serves streams
// over WebSocket (docs/SERVE.md) until SIGINT or SIGTERM, then closes them. Without the server
// built in (no Boost headers at build time) it says so in one line.
#include <malloc.h>
#include <pthread.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "commands.h"
#include "lingbot/error.h"
#include "lingbot/server.h"

namespace lingbot::cli {
namespace {

struct ServeArgs {
  EngineOptions engine;
  StreamOptions stream{.keyframe_interval = 0};  // 0: from each stream's announced length
  ServerOptions server;
  std::string token_file;
  double memory_limit_gb = 0;
};

// The token from --token-file (surrounding whitespace dropped) or LINGBOT_SERVE_TOKEN; a file
// keeps it out of the process list.
std::string read_token(const std::string& path) {
  if (path.empty()) {
    const char* env = std::getenv("LINGBOT_SERVE_TOKEN");
    return env ? env : "";
  }
  std::ifstream f(path);
  if (!f) throw Error("cannot read --token-file " + path);
  std::stringstream ss;
  ss << f.rdbuf();
  std::string t = ss.str();
  const auto first = t.find_first_not_of(" \t\r\n");
  if (first == std::string::npos) throw Error("--token-file " + path + " is empty");
  t = t.substr(first, t.find_last_not_of(" \t\r\n") - first + 1);
  return t;
}

int serve(ServeArgs& a) {
#ifdef LINGBOT_HAVE_SERVER
  // SIGINT and SIGTERM go to no thread: blocked here, before any thread starts (every thread
  // inherits the mask), and taken by sigwait below, which then stops the server in order.
  sigset_t quit;
  sigemptyset(&quit);
  sigaddset(&quit, SIGINT);
  sigaddset(&quit, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &quit, nullptr);

  ServerOptions o = a.server;
  o.token = read_token(a.token_file);
  o.stream = a.stream;
  if (a.memory_limit_gb > 0) o.memory_budget = static_cast<size_t>(a.memory_limit_gb * 1e9);
  // Each stream has a thread of its own; glibc would give each its own malloc arena and keep
  // their memory after the stream ends (RSS grows with every new stream). A few arenas suffice:
  // the threads allocate per frame, not per instruction.
  mallopt(M_ARENA_MAX, 4);
  // One engine per device of --device (a comma-separated list); streams go to the one with the
  // most room.
  std::vector<std::unique_ptr<Engine>> engines;
  std::stringstream devices(a.engine.device);
  for (std::string device; std::getline(devices, device, ',');) {
    EngineOptions eo = a.engine;
    eo.device = device;
    engines.push_back(Engine::create(eo));
    o.engines.push_back({engines.back().get(), eo});
  }
  LINGBOT_CHECK_ARG(!engines.empty(), "--device names no device");
  StreamServer server(o);
  server.start();
  std::printf("serving %s (WebSocket %sv1/stream%s%s)\n", server.url().c_str(),
              server.url().replace(0, 4, "ws").c_str(), o.token.empty() ? "" : ", token required",
              o.view ? "; a live stream in the browser: /?session=ID" : "");
  std::fflush(stdout);
  int sig = 0;
  sigwait(&quit, &sig);
  std::fprintf(stderr, "serve: stopping\n");
  server.stop();
  const ServerStats s = server.stats();
  std::fprintf(stderr,
               "serve: %lld streams finished, %lld refused, %lld closed for errors, %lld "
               "disconnected; %lld frames\n",
               static_cast<long long>(s.finished), static_cast<long long>(s.refused),
               static_cast<long long>(s.errors), static_cast<long long>(s.disconnected),
               static_cast<long long>(s.frames));
  return 0;
#else
  (void)a;
  throw Error(
      "this lingbot-map was built without the stream server (it needs Boost headers at build "
      "time: run scripts/setup.sh, then build again)");
#endif
}

}  // namespace

void add_serve(CLI::App& app) {
  auto a = std::make_shared<ServeArgs>();
  CLI::App* sub = app.add_subcommand("serve", "Serve streams over WebSocket (docs/SERVE.md)");
  add_stream_options(sub, a->engine, a->stream);
  sub->get_option("--device")
      ->description("cpu, cuda or cuda:N, or several GPUs: cuda:0,cuda:1 (an engine on each)");
  ServerOptions& s = a->server;
  sub->add_option("--host", s.host, "address to listen on (0.0.0.0 serves other machines too)")
      ->capture_default_str();
  sub->add_option("--port", s.port, "port (0 = any free port)")
      ->capture_default_str()
      ->check(CLI::Range(0, 65535));
  sub->add_option("--token-file", a->token_file,
                  "clients must present the token in this file (default: LINGBOT_SERVE_TOKEN, "
                  "else none)");
  sub->add_option("--max-sessions", s.max_sessions, "streams served at once")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 16));
  sub->add_option("--max-frame-bytes", s.max_frame_bytes, "largest frame message")
      ->capture_default_str()
      ->check(CLI::Range(size_t{16}, size_t{1} << 32));
  sub->add_option("--queue", s.queue, "frames read ahead of each stream's model steps")
      ->capture_default_str()
      ->check(CLI::Range(1, 1024));
  sub->add_option("--start-timeout", s.start_timeout_s,
                  "seconds a connection may take to send its start message")
      ->capture_default_str()
      ->check(CLI::Range(1, 3600));
  sub->add_option("--stream-idle-timeout", s.stream_idle_timeout_s,
                  "seconds a started stream may leave the server waiting for its next frame")
      ->capture_default_str()
      ->check(CLI::Range(1, 3600));
  sub->add_flag("--view", s.view,
                "serve the browser viewer too: each live stream at /?session=ID (its id is in "
                "/v1/info)");
  sub->add_option("--memory-limit-gb", a->memory_limit_gb,
                  "memory the streams may reserve (default: what is free after loading)")
      ->check(CLI::NonNegativeNumber);
  commands().push_back({sub, [a] { return serve(*a); }});
}

}  // namespace lingbot::cli
