// The background optimizer: the stream pushes nodes and loops under a short lock; one worker
// thread owns the graph, moves what was pushed into it when a loop arrives, solves it and
// publishes the corrections as one immutable snapshot.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>

#include "lingbot/error.h"
#include "lingbot/loop.h"

namespace lingbot {

struct LoopCloser::Impl {
  struct PendingNode {
    int64_t id;
    Sim3 pose;
    bool has_previous;
    Sim3 from_previous;
  };

  PoseGraph graph;  // the worker's alone
  ReportCallback on_report;

  mutable std::mutex m;
  std::condition_variable wake, idle;
  std::vector<PendingNode> nodes;  // pushed, not yet in the graph
  std::vector<PoseEdge> loops;
  std::vector<int64_t> ids;  // every node pushed, to check loops on the caller's thread
  int64_t requested = 0;     // loops pushed
  int64_t solved = 0;        // loops pushed before the last solve began, once it ended
  bool stop = false;
  std::string error;
  int64_t solves = 0;
  std::atomic<bool> cancel{false};

  mutable std::mutex published_m;
  std::shared_ptr<const PoseCorrections> published = std::make_shared<PoseCorrections>();

  std::thread worker;

  explicit Impl(PoseGraphOptions options, ReportCallback cb)
      : graph(options), on_report(std::move(cb)) {}

  void push_node(int64_t id, const Sim3& pose, const Sim3* from_previous) {
    LINGBOT_CHECK_ARG(std::isfinite(pose.s) && pose.s > 0, "loop closer: scale must be positive");
    std::lock_guard<std::mutex> lock(m);
    LINGBOT_CHECK_ARG(ids.empty() || id > ids.back(),
                      "loop closer: node " + std::to_string(id) + " is not after the last one");
    ids.push_back(id);
    nodes.push_back({id, pose, from_previous != nullptr, from_previous ? *from_previous : Sim3{}});
  }

  void run() {
    std::unique_lock<std::mutex> lock(m);
    for (;;) {
      wake.wait(lock, [&] { return stop || requested > solved; });
      if (stop) return;
      std::vector<PendingNode> new_nodes;
      std::vector<PoseEdge> new_loops;
      new_nodes.swap(nodes);
      new_loops.swap(loops);
      const int64_t target = requested;
      const bool failed = !error.empty();
      lock.unlock();
      std::string err;
      if (!failed) {
        try {
          solve(new_nodes, new_loops);
        } catch (const std::exception& e) {
          err = e.what();
        }
      }
      lock.lock();
      if (!err.empty() && error.empty()) error = err;
      solved = target;
      idle.notify_all();
    }
  }

  void solve(const std::vector<PendingNode>& new_nodes, const std::vector<PoseEdge>& new_loops) {
    for (const PendingNode& p : new_nodes) {
      if (p.has_previous)
        graph.add_node(p.id, p.pose, p.from_previous);
      else
        graph.add_node(p.id, p.pose);
    }
    const size_t first_new = static_cast<size_t>(graph.loops());
    for (const PoseEdge& l : new_loops) graph.add_loop(l);
    LoopReport report;
    report.summary = graph.optimize(&cancel);
    if (report.summary.cancelled) return;
    auto corrections = std::make_shared<PoseCorrections>(graph.corrections());
    {
      std::lock_guard<std::mutex> lock(published_m);
      corrections->version = published->version + 1;
      published = corrections;
    }
    {
      std::lock_guard<std::mutex> lock(m);
      ++solves;
    }
    if (!on_report) return;
    report.new_loops.assign(report.summary.loops.begin() + first_new, report.summary.loops.end());
    report.version = corrections->version;
    report.nodes = graph.size();
    on_report(report);
  }
};

LoopCloser::LoopCloser(PoseGraphOptions options, ReportCallback on_report) {
  LINGBOT_CHECK(loop_closure_available(),
                "loop closure is not available: this build has no Ceres (install libceres-dev "
                "and rebuild)");
  impl_ = std::make_unique<Impl>(options, std::move(on_report));
  impl_->worker = std::thread([this] { impl_->run(); });
}

LoopCloser::~LoopCloser() {
  {
    std::lock_guard<std::mutex> lock(impl_->m);
    impl_->stop = true;
  }
  impl_->cancel = true;
  impl_->wake.notify_all();
  impl_->worker.join();
}

void LoopCloser::add_keyframe(int64_t frame, const Sim3& streamed_c2w) {
  impl_->push_node(frame, streamed_c2w, nullptr);
}

void LoopCloser::add_node(int64_t id, const Sim3& streamed, const Sim3& from_previous) {
  impl_->push_node(id, streamed, &from_previous);
}

void LoopCloser::add_loop(const PoseEdge& loop) {
  {
    std::lock_guard<std::mutex> lock(impl_->m);
    auto known = [&](int64_t id) {
      return std::binary_search(impl_->ids.begin(), impl_->ids.end(), id);
    };
    LINGBOT_CHECK_ARG(known(loop.from) && known(loop.to) && loop.from != loop.to,
                      "loop closer: loop " + std::to_string(loop.from) + " -> " +
                          std::to_string(loop.to) + " does not join two added nodes");
    LINGBOT_CHECK_ARG(std::isfinite(loop.relative.s) && loop.relative.s > 0,
                      "loop closer: loop scale must be positive");
    impl_->loops.push_back(loop);
    ++impl_->requested;
  }
  impl_->wake.notify_one();
}

std::shared_ptr<const PoseCorrections> LoopCloser::corrections() const {
  std::lock_guard<std::mutex> lock(impl_->published_m);
  return impl_->published;
}

void LoopCloser::finish() {
  std::unique_lock<std::mutex> lock(impl_->m);
  const int64_t target = impl_->requested;
  impl_->idle.wait(lock, [&] { return impl_->solved >= target; });
}

std::string LoopCloser::error() const {
  std::lock_guard<std::mutex> lock(impl_->m);
  return impl_->error;
}

int64_t LoopCloser::solves() const {
  std::lock_guard<std::mutex> lock(impl_->m);
  return impl_->solves;
}

}  // namespace lingbot
