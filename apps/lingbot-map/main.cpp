// lingbot-map: command-line front end. Every failure ends as one line on stderr and exit 1.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>

#include "commands.h"
#include "lingbot/error.h"
#include "lingbot/lingbot_c.h"

namespace {

// The subcommands' names, for the message about an unknown one.
std::string command_names(const CLI::App& app, bool& known, const std::string& name) {
  std::string names;
  for (const CLI::App* sub : app.get_subcommands({})) {
    names += (names.empty() ? "" : ", ") + sub->get_name();
    known = known || sub->check_name(name);
  }
  return names;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"lingbot-map: streaming 3D reconstruction (LingBot-Map) in C++"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("lingbot-map ") + lingbot_version());
  lingbot::cli::register_commands(app);
  lingbot::cli::set_command_line(argc, argv);
  try {
    // CLI11 reports a misspelt command as a missing one; name it and the commands there are.
    if (argc > 1 && argv[1][0] != '-') {
      bool known = false;
      const std::string names = command_names(app, known, argv[1]);
      if (!known)
        throw CLI::ParseError(
            "unknown command '" + std::string(argv[1]) + "' (commands: " + names + ")",
            CLI::ExitCodes::ExtrasError);
    }
    app.parse(argc, argv);
    return lingbot::cli::run_selected(app);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help, --version
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
