#include "serve/metrics.h"

#include <algorithm>
#include <cstdio>
#include <fstream>

#if defined(__GLIBC__)
#include <malloc.h>
#include <unistd.h>
#endif

namespace lingbot::serve {
namespace {

constexpr auto kRateWindow = std::chrono::seconds(5);  // frames/s over this long
constexpr size_t kMaxRecent = 4096;                    // send times kept per session
constexpr size_t kLatencies = 4096;                    // quantiles over this many last frames

const char* name(Outcome o) {
  switch (o) {
    case Outcome::Finished:
      return "finished";
    case Outcome::Refused:
      return "refused";
    case Outcome::Error:
      return "error";
    case Outcome::Disconnected:
      return "disconnected";
  }
  return "?";
}

// Resident memory of this process (Linux), or -1.
long long resident_bytes() {
#if defined(__GLIBC__)
  std::ifstream statm("/proc/self/statm");
  long long pages = 0, resident = 0;
  if (statm >> pages >> resident) return resident * sysconf(_SC_PAGESIZE);
#endif
  return -1;
}

// Bytes malloc has handed out and not had back (heap and mmapped blocks), or -1. Unlike the
// resident size, it does not count pages the allocator keeps after a free: a leak shows here
// as growth from one idle moment to the next, where the resident size moves with how the
// sessions' buffers happened to fall into the heap.
// Not under AddressSanitizer, whose allocator glibc's statistics do not see.
long long heap_in_use_bytes() {
#if defined(__GLIBC__) && (__GLIBC__ > 2 || __GLIBC_MINOR__ >= 33) && !defined(__SANITIZE_ADDRESS__)
  const struct mallinfo2 m = mallinfo2();
  return static_cast<long long>(m.uordblks + m.hblkhd);
#else
  return -1;
#endif
}

}  // namespace

void Metrics::started(const std::string& id, const std::string& device) {
  std::lock_guard lock(mu_);
  live_[id].device = device;
}

void Metrics::ended(const std::string& id, Outcome outcome) {
  std::lock_guard lock(mu_);
  ++outcomes_[static_cast<int>(outcome)];
  live_.erase(id);
}

void Metrics::result_sent(const std::string& id, Clock::duration latency) {
  const Clock::time_point now = Clock::now();
  std::lock_guard lock(mu_);
  ++frames_;
  const double s = std::chrono::duration<double>(latency).count();
  latency_sum_ += s;
  if (latencies_.size() < kLatencies) {
    latencies_.push_back(s);
  } else {
    latencies_[next_latency_] = s;
    next_latency_ = (next_latency_ + 1) % kLatencies;
  }
  auto it = live_.find(id);
  if (it == live_.end()) return;
  ++it->second.frames;
  it->second.recent.push_back(now);
  if (it->second.recent.size() > kMaxRecent) it->second.recent.pop_front();
}

double Metrics::fps(const Live& s, Clock::time_point now) {
  const auto n = std::count_if(s.recent.begin(), s.recent.end(),
                               [&](Clock::time_point t) { return now - t <= kRateWindow; });
  return double(n) / std::chrono::duration<double>(kRateWindow).count();
}

ServerStats Metrics::stats() const {
  std::lock_guard lock(mu_);
  return {.sessions = static_cast<int64_t>(live_.size()),
          .finished = outcomes_[int(Outcome::Finished)],
          .refused = outcomes_[int(Outcome::Refused)],
          .errors = outcomes_[int(Outcome::Error)],
          .disconnected = outcomes_[int(Outcome::Disconnected)],
          .frames = frames_};
}

std::vector<SessionInfo> Metrics::sessions() const {
  const Clock::time_point now = Clock::now();
  std::lock_guard lock(mu_);
  std::vector<SessionInfo> out;
  for (const auto& [id, s] : live_) out.push_back({id, s.device, s.frames, fps(s, now)});
  return out;
}

std::string Metrics::prometheus(const std::vector<ServedDeviceStats>& devices) const {
  const Clock::time_point now = Clock::now();
  const long long rss = resident_bytes(), heap = heap_in_use_bytes();  // outside the lock
  std::lock_guard lock(mu_);
  std::string out;
  char line[512];
  const auto add = [&](const char* fmt, auto... args) {
    std::snprintf(line, sizeof line, fmt, args...);
    out += line;
  };
  // Session ids and device names are the server's own (no client text reaches a label).
  add("# HELP lingbot_sessions_active Streams being served.\n"
      "# TYPE lingbot_sessions_active gauge\nlingbot_sessions_active %zu\n",
      live_.size());
  add("# HELP lingbot_sessions_total Streams ended, by outcome.\n"
      "# TYPE lingbot_sessions_total counter\n");
  for (Outcome o : {Outcome::Finished, Outcome::Refused, Outcome::Error, Outcome::Disconnected})
    add("lingbot_sessions_total{outcome=\"%s\"} %lld\n", name(o),
        static_cast<long long>(outcomes_[int(o)]));
  add("# HELP lingbot_frames_total Results sent, all streams.\n"
      "# TYPE lingbot_frames_total counter\nlingbot_frames_total %lld\n",
      static_cast<long long>(frames_));
  add("# HELP lingbot_session_frames_total Results sent, per live stream.\n"
      "# TYPE lingbot_session_frames_total counter\n");
  for (const auto& [id, s] : live_)
    add("lingbot_session_frames_total{session=\"%s\"} %lld\n", id.c_str(),
        static_cast<long long>(s.frames));
  add("# HELP lingbot_session_fps Results per second over the last 5 s, per live stream.\n"
      "# TYPE lingbot_session_fps gauge\n");
  for (const auto& [id, s] : live_)
    add("lingbot_session_fps{session=\"%s\"} %.3f\n", id.c_str(), fps(s, now));
  add("# HELP lingbot_frame_latency_seconds Frame received to result sent, last %zu frames.\n"
      "# TYPE lingbot_frame_latency_seconds summary\n",
      kLatencies);
  std::vector<double> sorted = latencies_;
  std::sort(sorted.begin(), sorted.end());
  for (double q : {0.5, 0.99}) {
    const double v = sorted.empty() ? 0.0 : sorted[size_t(q * double(sorted.size() - 1) + 0.5)];
    add("lingbot_frame_latency_seconds{quantile=\"%g\"} %.6f\n", q, v);
  }
  add("lingbot_frame_latency_seconds_sum %.6f\nlingbot_frame_latency_seconds_count %lld\n",
      latency_sum_, static_cast<long long>(frames_));
  add("# HELP lingbot_device_memory_free_bytes Budget left for new streams, per device.\n"
      "# TYPE lingbot_device_memory_free_bytes gauge\n");
  for (const ServedDeviceStats& d : devices)
    add("lingbot_device_memory_free_bytes{device=\"%s\"} %zu\n", d.device.c_str(),
        d.budget_bytes > d.reserved_bytes ? d.budget_bytes - d.reserved_bytes : size_t{0});
  add("# HELP lingbot_device_memory_reserved_bytes Preflight estimates of the live streams.\n"
      "# TYPE lingbot_device_memory_reserved_bytes gauge\n");
  for (const ServedDeviceStats& d : devices)
    add("lingbot_device_memory_reserved_bytes{device=\"%s\"} %zu\n", d.device.c_str(),
        d.reserved_bytes);
  if (rss >= 0)
    add("# HELP process_resident_memory_bytes Resident memory size in bytes.\n"
        "# TYPE process_resident_memory_bytes gauge\nprocess_resident_memory_bytes %lld\n",
        rss);
  if (heap >= 0)
    add("# HELP lingbot_heap_in_use_bytes Host memory allocated and not yet freed.\n"
        "# TYPE lingbot_heap_in_use_bytes gauge\nlingbot_heap_in_use_bytes %lld\n",
        heap);
  return out;
}

}  // namespace lingbot::serve
