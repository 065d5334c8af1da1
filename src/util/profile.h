// Wall-clock time per model stage, on when LINGBOT_PROFILE=1 (totals: lingbot/profile.h). Each
// scope synchronizes the backend at both ends, so it measures device time too (and slows the run:
// profiling only).
#pragma once

#include <chrono>
#include <map>
#include <string>

#include "backend/ops.h"
#include "lingbot/profile.h"

namespace lingbot {

class ProfileScope {
 public:
  ProfileScope(Backend& b, const char* stage) : b_(b), stage_(stage), on_(Profile::enabled()) {
    if (!on_) return;
    b_.synchronize();
    t0_ = std::chrono::steady_clock::now();
  }
  ~ProfileScope() {
    if (!on_) return;
    b_.synchronize();
    Profile::totals_ms()[stage_] +=
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0_).count();
  }

 private:
  Backend& b_;
  const char* stage_;
  bool on_;
  std::chrono::steady_clock::time_point t0_;
};

// Host time of one phase (LINGBOT_PROFILE=host), nothing synchronized.
class HostScope {
 public:
  explicit HostScope(const char* phase) : phase_(phase), on_(Profile::host_enabled()) {
    if (on_) t0_ = std::chrono::steady_clock::now();
  }
  ~HostScope() {
    if (!on_) return;
    Profile::totals_ms()[phase_] +=
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0_).count();
  }

 private:
  const char* phase_;
  bool on_;
  std::chrono::steady_clock::time_point t0_;
};

}  // namespace lingbot
