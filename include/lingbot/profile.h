// Public API: wall-clock time per model stage, collected when the environment sets
// LINGBOT_PROFILE=1 (each stage then synchronizes the device at both ends: profiling only).
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
  static bool enabled();
  static std::map<std::string, double>& totals_ms();  // stage -> accumulated ms
  static void reset() { totals_ms().clear(); }
};

}  // namespace lingbot
