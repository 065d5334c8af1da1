// Subcommands of the lingbot-map program; each lives in its own file.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <vector>

namespace lingbot::cli {

// A subcommand registers its options and the function that runs it when selected.
struct Command {
  CLI::App* app;
  std::function<int()> run;
};

std::vector<Command>& commands();
void register_commands(CLI::App& app);
int run_selected(CLI::App& app);

void add_inspect(CLI::App& app);

}  // namespace lingbot::cli
