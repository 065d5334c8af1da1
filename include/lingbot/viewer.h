// Public API: the browser viewer. A small HTTP + WebSocket server that serves its own page and
// streams a run's points, cameras and current frame to every browser connected:
//
//   lingbot::ViewerServer viewer({.port = 8080});
//   viewer.start();                                   // throws Error when the port is taken
//   lingbot::RunOptions o{.out_dir = "out"};
//   o.sinks.push_back(viewer.sink());                 // live: frames as the run makes them
//   lingbot::run(*engine, *source, o);
//   ...
//   viewer.load(lingbot::read_result("out"));         // or a finished run
//
// Nothing the browsers do slows the producer: a frame is encoded once and kept; each browser
// reads the frames at its own pace (a cursor into them), and an image or status update replaces
// the one it has not sent yet. See docs/ARCHITECTURE.md for the threads and the wire format.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "lingbot/exports.h"
#include "lingbot/result.h"

namespace lingbot {

struct ViewerOptions {
  std::string host = "127.0.0.1";  // "0.0.0.0" to serve other machines
  int port = 8080;                 // 0: any free port (see ViewerServer::port)
  // Points sent to the browsers: every stride-th pixel, confidence above min_confidence (the
  // browser's threshold slider filters further).
  PointOptions points{.conf_threshold = 1.0f, .stride = 4};
  float initial_threshold = 1.5f;  // the slider's starting position
  int image_width = 320;           // the current frame is sent at most this wide
  int max_clients = 16;            // connections beyond this are refused
  // The frames are kept for browsers that join later (~10 bytes a point); beyond this many
  // bytes every other point is dropped from those held, again as often as needed (0 = never).
  int64_t max_bytes = int64_t{512} << 20;
};

struct ViewerStats {
  int64_t frames = 0;          // frames held (each sent to every browser)
  int64_t points = 0;          // points held
  int64_t bytes = 0;           // encoded frame bytes held
  int64_t clients = 0;         // browsers connected now
  int64_t images_skipped = 0;  // frame images replaced before a browser took them
  int64_t bad_messages = 0;    // malformed control messages (their connections closed)
  int thinning = 1;            // every k-th point of each frame is held (max_bytes)
};

class ViewerServer {
 public:
  explicit ViewerServer(ViewerOptions options = {});
  ~ViewerServer();  // stops
  ViewerServer(const ViewerServer&) = delete;
  ViewerServer& operator=(const ViewerServer&) = delete;

  // Binds and starts serving on a thread of its own; throws Error when the address cannot be
  // used (a port in use, a bad host).
  void start();
  int port() const;         // the bound port (after start)
  std::string url() const;  // http://HOST:PORT/

  // A sink for lingbot::run: add() encodes the frame and returns (it never waits for a
  // browser); finish() marks the run finished. `expected_frames` (0 = unknown) spreads the
  // camera colours over the run before it ends.
  std::shared_ptr<ResultSink> sink(int64_t expected_frames = 0);
  // Replaces what is shown by a finished run (browsers connected start over); `name`: the file
  // names in images/ (read_result_image's).
  void load(const RunResult& run, const FrameNamer& name = {});

  ViewerStats stats() const;
  void stop();  // closes every connection and joins the thread; idempotent

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace lingbot
