// Subcommands of the lingbot-map program; each lives in its own file.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <string>
#include <vector>

#include "lingbot/engine.h"

namespace lingbot::cli {

// A subcommand registers its options and the function that runs it when selected.
struct Command {
  CLI::App* app;
  std::function<int()> run;
};

std::vector<Command>& commands();
// The program's arguments as typed (for run.json), set once by main.
void set_command_line(int argc, char** argv);
const std::vector<std::string>& command_line();
void register_commands(CLI::App& app);
int run_selected(CLI::App& app);

void add_inspect(CLI::App& app);
void add_run(CLI::App& app);
void add_demo(CLI::App& app);
void add_bench(CLI::App& app);
// --model, --arch, --device and the streaming knobs shared by run, demo and bench.
void add_stream_options(CLI::App* sub, EngineOptions& e, StreamOptions& s);
void add_preprocess(CLI::App& app);
void add_convert(CLI::App& app);
void add_view(CLI::App& app);
void add_render(CLI::App& app);
void add_serve(CLI::App& app);
void add_version(CLI::App& app);
void add_eval(CLI::App& app);

}  // namespace lingbot::cli
