// Public API: the stream server of `lingbot-map serve`. Each WebSocket connection on /v1/stream
// is one Session of a loaded Engine: the client sends frames (JPEG, PNG or raw RGB) and gets each
// frame's pose, intrinsics and optionally depth back, in order. Sessions of one engine share
// batched model steps; a stream that would not fit beside the ones already admitted (the memory
// preflight) is refused with the numbers. See docs/SERVE.md for the wire protocol.
//
//   auto engine = lingbot::Engine::create({.model = "model.safetensors", .device = "cuda"});
//   lingbot::StreamServer server({.port = 8090, .engines = {{engine.get(), eo}}});
//   server.start();                         // throws Error when the port is taken
//   std::printf("%s\n", server.url().c_str());
//   ...                                     // serves on its own threads
//   server.stop();                          // closes every session
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "lingbot/engine.h"

namespace lingbot {

// One loaded engine the server places sessions on, and the options it was created with (the
// preflight reads the architecture, precision and device from them; `device` names it in
// /metrics and /v1/info). One engine per device.
struct ServedEngine {
  Engine* engine = nullptr;
  EngineOptions options;
};

struct ServerOptions {
  std::string host = "127.0.0.1";             // "0.0.0.0" to serve other machines
  int port = 8090;                            // 0: any free port (see StreamServer::port)
  std::string token;                          // non-empty: clients must present it (docs/SERVE.md)
  int max_sessions = 16;                      // streams at once, over all engines
  size_t max_frame_bytes = size_t{32} << 20;  // one frame message; larger ones close the stream
  int queue = 4;                              // frames read ahead of a session's model steps
  int start_timeout_s = 10;  // a connection with no "start" message by then is closed (1008)
  // A started stream that sends no frame (nor "finish") for this long while the server waits
  // for one is closed (1008), so that idle clients do not hold the server's slots.
  int stream_idle_timeout_s = 30;
  StreamOptions stream;  // defaults for what a start message leaves out
  std::vector<ServedEngine> engines;
  // Bytes the sessions of each engine may reserve; 0 = measured when the server starts: the
  // device's free memory after the weights, or the host's available memory on the CPU.
  size_t memory_budget = 0;
  // The browser viewer's page at / and each live stream at /?session=ID (its WebSocket
  // /ws?session=ID); needs the viewer built in (LINGBOT_HAVE_VIEWER), else start() throws.
  bool view = false;
};

struct ServedDeviceStats {
  std::string device;
  size_t budget_bytes = 0;    // what its sessions may reserve
  size_t reserved_bytes = 0;  // the preflight estimates of its sessions now
  int64_t sessions = 0;
};

struct ServerStats {
  int64_t sessions = 0;  // streaming now
  int64_t finished = 0;  // ended by the client's finish
  int64_t refused = 0;   // refused by admission control, or at the handshake (503)
  // Closed for a malformed or out-of-order message, a timeout or a WebSocket protocol error.
  int64_t errors = 0;
  int64_t disconnected = 0;  // the client went away (before its "start" included)
  int64_t frames = 0;        // results sent, all sessions
  std::vector<ServedDeviceStats> devices{};
};

class StreamServer {
 public:
  explicit StreamServer(ServerOptions options);
  ~StreamServer();  // stops
  StreamServer(const StreamServer&) = delete;
  StreamServer& operator=(const StreamServer&) = delete;

  // Measures the memory budgets, binds and starts serving on threads of its own (one for the
  // network, one per session); throws Error when the address cannot be used.
  void start();
  int port() const;         // the bound port (after start)
  std::string url() const;  // http://HOST:PORT/
  ServerStats stats() const;
  // Closes every session (WebSocket close 1001, "going away"), waits for their threads and
  // stops; idempotent.
  void stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace lingbot
