// The server's counters: sessions by outcome, frames, each session's frame rate and the latency
// from a frame's arrival to its result's departure; written as Prometheus text for /metrics.
// Updated from the network thread and the session workers (one mutex; a few updates a frame).
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "lingbot/server.h"

namespace lingbot::serve {

using Clock = std::chrono::steady_clock;

enum class Outcome { Finished, Refused, Error, Disconnected };

struct SessionInfo {
  std::string id, device;
  int64_t frames = 0;
  double fps = 0;
};

class Metrics {
 public:
  void started(const std::string& id, const std::string& device);
  void ended(const std::string& id, Outcome outcome);  // id may be empty: no session was started
  // A result went out `latency` after its frame came in.
  void result_sent(const std::string& id, Clock::duration latency);

  ServerStats stats() const;  // without the devices
  std::vector<SessionInfo> sessions() const;
  std::string prometheus(const std::vector<ServedDeviceStats>& devices) const;

 private:
  struct Live {
    std::string device;
    int64_t frames = 0;
    std::deque<Clock::time_point> recent;  // send times of the last frames (kRateWindow)
  };
  static double fps(const Live& s, Clock::time_point now);

  mutable std::mutex mu_;
  std::map<std::string, Live> live_;
  int64_t outcomes_[4] = {};
  int64_t frames_ = 0;
  std::vector<double> latencies_;  // seconds, a ring of the last kLatencies
  size_t next_latency_ = 0;
};

}  // namespace lingbot::serve
