// The browser viewer in the CLI: `view RESULT_DIR` and `run --view` share these options and the
// wait for Ctrl-C. Without the viewer compiled in (no Boost or npm at build time) the options
// still parse and say so.
#pragma once

#include <CLI/CLI.hpp>
#include <memory>
#include <string>

#include "lingbot/exports.h"

namespace lingbot {
class ViewerServer;
}

namespace lingbot::cli {

struct ViewerArgs {
  bool enabled = false;  // run: --view
  int port = 8080;
  std::string host = "127.0.0.1";
};
void add_viewer_options(CLI::App* sub, ViewerArgs& a);

// Starts a server on the arguments' address and prints its URL on stderr; throws Error when
// the port is taken or the viewer is not built in.
std::shared_ptr<ViewerServer> start_viewer(const ViewerArgs& a, const PointOptions& points,
                                           float initial_threshold);
// server.sink(expected_frames), for lingbot::run's sinks.
std::shared_ptr<ResultSink> viewer_sink(ViewerServer& server, int64_t expected_frames);
// Keeps serving until Ctrl-C or SIGTERM.
void serve_until_interrupted(const ViewerServer& server);

}  // namespace lingbot::cli
