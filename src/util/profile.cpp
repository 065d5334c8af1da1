#include "util/profile.h"

#include <cstdlib>
#include <cstring>

namespace lingbot {

namespace {
const char* profile_mode() {
  const char* v = std::getenv("LINGBOT_PROFILE");
  return v ? v : "";
}
}  // namespace

bool Profile::enabled() {
  static const bool on = [] {
    const char* v = profile_mode();
    return *v && std::strcmp(v, "0") != 0 && std::strcmp(v, "host") != 0;
  }();
  return on;
}

bool Profile::host_enabled() {
  static const bool on = std::strcmp(profile_mode(), "host") == 0;
  return on;
}

}  // namespace lingbot
