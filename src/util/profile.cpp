#include "util/profile.h"

#include <cstdlib>
#include <cstring>

namespace lingbot {

bool Profile::enabled() {
  static const bool on = [] {
    const char* v = std::getenv("LINGBOT_PROFILE");
    return v && *v && std::strcmp(v, "0") != 0;
  }();
  return on;
}

std::map<std::string, double>& Profile::totals_ms() {
  static std::map<std::string, double> totals;
  return totals;
}

}  // namespace lingbot
