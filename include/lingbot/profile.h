// Public API: wall-clock time per model stage, collected when the environment sets
// LINGBOT_PROFILE=1 (each stage then synchronizes the device at both ends: profiling only).
// LINGBOT_PROFILE=host instead times what the host thread does per step without synchronizing
// anything (queueing the step's device work, waiting for its results), so the pipeline runs as
// it does in production: a host phase that grows towards the device's frame time shows there.
// Each engine keeps its own totals (Engine::profile_ms), and lingbot::run reports a run's own
// (RunReport::profile_ms).
//
//   engine->reset_profile();
//   ... push frames ...
//   for (auto& [stage, ms] : engine->profile_ms()) std::printf("%s %.2f\n", ...);
#pragma once

namespace lingbot {

// Which profiling the process's environment asked for (read once).
class Profile {
 public:
  static bool enabled();       // LINGBOT_PROFILE=1: synchronized stages
  static bool host_enabled();  // LINGBOT_PROFILE=host: the host's phases, nothing synchronized
};

}  // namespace lingbot
