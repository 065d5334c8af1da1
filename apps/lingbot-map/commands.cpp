#include "commands.h"

namespace lingbot::cli {

std::vector<Command>& commands() {
  static std::vector<Command> all;
  return all;
}

namespace {
std::vector<std::string>& arguments() {
  static std::vector<std::string> all;
  return all;
}
}  // namespace

void set_command_line(int argc, char** argv) {
  arguments().assign(argv, argv + argc);
}
const std::vector<std::string>& command_line() {
  return arguments();
}

void register_commands(CLI::App& app) {
  add_run(app);
  add_demo(app);
  add_bench(app);
  add_inspect(app);
  add_preprocess(app);
  add_convert(app);
  add_view(app);
  add_render(app);
  add_serve(app);
  add_version(app);
  add_eval(app);
}

int run_selected(CLI::App& app) {
  for (auto& c : commands())
    if (c.app->parsed()) return c.run();
  return 1;
}

}  // namespace lingbot::cli
