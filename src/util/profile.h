// Wall-clock time per model stage, on when LINGBOT_PROFILE=1 (or the host's phases with
// LINGBOT_PROFILE=host; lingbot/profile.h). The times go to the totals of the engine whose
// model runs the stage (Engine::profile_ms), so engines in one process keep theirs apart.
// ProfileScope synchronizes the backend at both ends, so it measures device time too (and slows
// the run: profiling only).
#pragma once

#include <chrono>
#include <map>
#include <mutex>
#include <string>

#include "backend/ops.h"
#include "lingbot/profile.h"

namespace lingbot {

// One engine's milliseconds per stage. Sessions of one engine queue and collect steps from
// several threads, so additions and reads take a lock (only while profiling).
class ProfileTotals {
 public:
  void add(const char* stage, double ms) {
    std::lock_guard<std::mutex> lock(mu_);
    ms_[stage] += ms;
  }
  std::map<std::string, double> snapshot() const {
    std::lock_guard<std::mutex> lock(mu_);
    return ms_;
  }
  void reset() {
    std::lock_guard<std::mutex> lock(mu_);
    ms_.clear();
  }

 private:
  mutable std::mutex mu_;
  std::map<std::string, double> ms_;
};

// A stage's device and host time (LINGBOT_PROFILE=1). Null totals (a component used without a
// model, as parity tests do) time nothing.
class ProfileScope {
 public:
  ProfileScope(Backend& b, ProfileTotals* totals, const char* stage)
      : b_(b), totals_(totals), stage_(stage), on_(totals && Profile::enabled()) {
    if (!on_) return;
    b_.synchronize();
    t0_ = std::chrono::steady_clock::now();
  }
  ~ProfileScope() {
    if (!on_) return;
    b_.synchronize();
    totals_->add(
        stage_,
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0_).count());
  }

 private:
  Backend& b_;
  ProfileTotals* totals_;
  const char* stage_;
  bool on_;
  std::chrono::steady_clock::time_point t0_;
};

// Host time of one phase (LINGBOT_PROFILE=host), nothing synchronized.
class HostScope {
 public:
  HostScope(ProfileTotals& totals, const char* phase)
      : totals_(totals), phase_(phase), on_(Profile::host_enabled()) {
    if (on_) t0_ = std::chrono::steady_clock::now();
  }
  ~HostScope() {
    if (!on_) return;
    totals_.add(
        phase_,
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0_).count());
  }

 private:
  ProfileTotals& totals_;
  const char* phase_;
  bool on_;
  std::chrono::steady_clock::time_point t0_;
};

}  // namespace lingbot
