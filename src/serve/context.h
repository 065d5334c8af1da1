// What the stream server's connections share: its options, admission control, the metrics and
// the session workers. Owned by StreamServer; its connections and workers end before it.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "lingbot/server.h"
#include "serve/admission.h"
#include "serve/metrics.h"
#include "serve/protocol.h"
#include "serve/worker.h"

namespace lingbot::serve {

class Context {
 public:
  Context(ServerOptions options, std::vector<Admission::Device> budgets);

  // A stream admitted (worker set) or refused (worker null, with the reason and numbers).
  struct Opened {
    std::shared_ptr<SessionWorker> worker;
    std::string id, device;
    size_t need = 0, free = 0;
    std::string refused;
  };
  // Admission for `start` (its keyframe interval resolved first), then a worker on the chosen
  // engine; `wake` is the worker's way back to the network thread.
  Opened open(Start start, std::function<void()> wake);
  // Cancels and joins every worker; afterwards none calls its `wake`.
  void stop_workers();

  const ServerOptions options;
  Admission admission;
  Metrics metrics;
  std::atomic<int> connections{0};  // StreamConnection objects alive
  // serve --view: a new stream's live view (id, expected frames); empty: no views.
  std::function<std::shared_ptr<ResultSink>(const std::string&, int64_t)> open_view;

 private:
  std::vector<size_t> estimates(const Start& start) const;

  std::mutex mu_;
  std::vector<std::shared_ptr<SessionWorker>> workers_;  // joined once done
  int64_t next_id_ = 0;
};

}  // namespace lingbot::serve
