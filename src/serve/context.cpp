#include "serve/context.h"

#include <algorithm>
#include <cstdio>

#include "lingbot/error.h"
#include "lingbot/preflight.h"

namespace lingbot::serve {

Context::Context(ServerOptions options, std::vector<Admission::Device> budgets)
    : options(std::move(options)), admission(std::move(budgets)) {}

// Per engine, what the session will hold beside the weights at its peak: its caches, its
// activations, and on the CPU the results on their way out. An open-ended stream counts the
// frames its caches keep for good (the scale frames and the window).
std::vector<size_t> Context::estimates(const Start& start) const {
  std::vector<size_t> need;
  for (const ServedEngine& e : options.engines) {
    RunPlan plan;
    plan.engine = e.options;
    plan.height = start.model_height;
    plan.width = start.model_width;
    plan.frames =
        start.frames > 0 ? start.frames : int64_t{start.stream.scale_frames} + start.stream.window;
    plan.stream = start.stream;
    plan.results.predictions = false;
    plan.results.on_host = e.options.device == "cpu";
    if (plan.engine.arch.empty()) plan.engine.arch = e.engine->info().arch;  // no checkpoint read
    const MemoryEstimate m = preflight(plan, /*with_time=*/false).need;
    need.push_back(m.total - m.weights);
  }
  return need;
}

static std::string mib(size_t bytes) {
  char s[32];
  std::snprintf(s, sizeof s, "%.1f MiB", double(bytes) / double(1 << 20));
  return s;
}

Context::Opened Context::open(Start start, std::function<void()> wake) {
  if (start.stream.keyframe_interval == 0)
    start.stream.keyframe_interval = auto_keyframe_interval(start.frames);
  Opened o;
  const std::vector<size_t> need = estimates(start);
  int64_t active = 0;
  const std::vector<ServedDeviceStats> devices = admission.devices();
  for (size_t i = 0; i < devices.size(); ++i) {
    active += devices[i].sessions;
    // For the refusal's numbers: the device with the most room, and the need there.
    const ServedDeviceStats& d = devices[i];
    const size_t room = d.budget_bytes - std::min(d.budget_bytes, d.reserved_bytes);
    if (i == 0 || room > o.free) {
      o.free = room;
      o.need = need[i];
    }
  }
  if (active >= options.max_sessions) {
    o.refused =
        "the server is serving its maximum of " + std::to_string(options.max_sessions) + " streams";
    metrics.ended("", Outcome::Refused);
    return o;
  }
  const Admission::Decision d = admission.admit(need);
  o.need = d.need;
  o.free = d.free;
  if (d.device < 0) {
    o.refused = "the stream needs " + mib(d.need) + " beside the weights, " + mib(d.free) +
                " is free beside the streams already served";
    metrics.ended("", Outcome::Refused);
    return o;
  }
  const ServedEngine& e = options.engines[d.device];
  std::lock_guard lock(mu_);
  if (stopped_) {  // a start that raced the server's stop: no thread may begin now
    admission.release(d.device, d.need);
    o.refused = "the server is stopping";
    metrics.ended("", Outcome::Refused);
    return o;
  }
  std::erase_if(workers_, [](const auto& w) { return w->done(); });
  o.id = std::to_string(++next_id_);
  o.device = e.options.device;
  metrics.started(o.id, o.device);
  o.worker = std::make_shared<SessionWorker>(
      WorkerSetup{.engine = e.engine,
                  .start = start,
                  .id = o.id,
                  .queue = options.queue,
                  // A result and its maps for each frame read ahead, and the first block's.
                  .max_out = size_t(2) * (options.queue + 1),
                  .reservation = std::make_unique<Reservation>(admission, d.device, d.need),
                  .metrics = &metrics,
                  .wake = std::move(wake),
                  .view = open_view ? open_view(o.id, start.frames) : nullptr});
  workers_.push_back(o.worker);
  return o;
}

void Context::stop_workers() {
  std::vector<std::shared_ptr<SessionWorker>> all;
  {
    std::lock_guard lock(mu_);
    stopped_ = true;
    all.swap(workers_);
  }
  for (auto& w : all) w->cancel(Outcome::Disconnected);  // all at once, then wait for each
  for (auto& w : all) w->stop();
}

}  // namespace lingbot::serve
