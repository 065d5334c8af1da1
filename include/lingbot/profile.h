// Public API: wall-clock time per model stage, collected when the environment sets
// LINGBOT_PROFILE=1 (each stage then synchronizes the device at both ends: profiling only).
// LINGBOT_PROFILE=host instead times what the host thread does per step without synchronizing
// anything (queueing the step's device work, waiting for its results), so the pipeline runs as
// it does in production: a host phase that grows towards the device's frame time shows there.
// The totals are not guarded for concurrent sessions.
//
//   lingbot::Profile::reset();
//   ... push frames ...
//   for (auto& [stage, ms] : lingbot::Profile::totals_ms()) std::printf("%s %.2f\n", ...);
#pragma once

#include <map>
#include <string>

namespace lingbot {

class Profile {
 public:
  static bool enabled();       // LINGBOT_PROFILE=1: synchronized stages
  static bool host_enabled();  // LINGBOT_PROFILE=host: the host's phases, nothing synchronized
  static std::map<std::string, double>& totals_ms();  // stage -> accumulated ms
  static void reset() { totals_ms().clear(); }
};

}  // namespace lingbot
