// The run's stopwatch: seconds since a steady-clock time point.
#pragma once

#include <chrono>

namespace lingbot {

using Clock = std::chrono::steady_clock;

inline double since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

}  // namespace lingbot
