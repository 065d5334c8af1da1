// lingbot-map: command-line front end. Every failure ends as one line on stderr and exit 1.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>

#include "commands.h"
#include "lingbot/error.h"

int main(int argc, char** argv) {
  CLI::App app{"lingbot-map: streaming 3D reconstruction (LingBot-Map) in C++"};
  app.require_subcommand(1);
  lingbot::cli::register_commands(app);
  try {
    app.parse(argc, argv);
    return lingbot::cli::run_selected(app);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help
    std::fprintf(stderr, "lingbot-map: error: %s (see --help)\n", e.what());
  } catch (const lingbot::Error& e) {
    std::fprintf(stderr, "lingbot-map: error: %s\n", e.what());
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "lingbot-map: error: out of memory\n");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "lingbot-map: error: %s\n", e.what());
  }
  return 1;
}
