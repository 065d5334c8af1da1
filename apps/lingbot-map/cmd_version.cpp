// `lingbot-map version`: the release and what this build can do, for bug reports.
#include <cstdio>
#include <string>

#include "commands.h"
#include "lingbot/lingbot_c.h"

namespace lingbot::cli {
namespace {

int version() {
  std::string parts;
  auto part = [&](bool on, const char* name) {
    if (on) parts += std::string(parts.empty() ? "" : ", ") + name;
  };
#ifdef LINGBOT_HAVE_CUDA
  part(true, "cuda");
#endif
#ifdef LINGBOT_HAVE_FFMPEG
  part(true, "video (FFmpeg)");
#endif
#ifdef LINGBOT_HAVE_VIEWER
  part(true, "viewer");
#endif
#ifdef LINGBOT_HAVE_SERVER
  part(true, "server");
#endif
  std::printf("lingbot-map %s\nbuilt with: cpu%s%s\n", lingbot_version(), parts.empty() ? "" : ", ",
              parts.c_str());
  return 0;
}

}  // namespace

void add_version(CLI::App& app) {
  CLI::App* sub = app.add_subcommand("version", "Print the version and what this build includes");
  commands().push_back({sub, [] { return version(); }});
}

}  // namespace lingbot::cli
