// The output stage of a run: each export on its own thread behind a bounded queue, fed the
// results in frame order, so that encoding and writing files overlap the device and each other.
// An export that refers_to_earlier() adds a frame only once every export before it has: its
// files never name a picture or depth map that is not written yet.
#pragma once

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "lingbot/exports.h"
#include "run/bounded_queue.h"

namespace lingbot {

class OutputThreads {
 public:
  OutputThreads(std::vector<std::shared_ptr<ResultSink>> sinks, int queue);
  ~OutputThreads();  // stops the threads; each file stays as valid as after its last frame
  OutputThreads(const OutputThreads&) = delete;
  OutputThreads& operator=(const OutputThreads&) = delete;

  // Queues a result for every output; waits while a queue is full. Throws Error once an output
  // has failed (its message), so that the run stops.
  void add(std::shared_ptr<const FrameResult> result, std::shared_ptr<const Tensor> frame);
  // Waits for every queued result to be written and finishes every output; throws the first
  // failure.
  void finish();

  bool empty() const { return outputs_.empty(); }
  // Seconds each output has worked, by name (outputs of one name add up).
  std::vector<std::pair<std::string, double>> busy() const;
  // After finish(): each output's notes (what it left out), the empty ones omitted.
  std::vector<std::string> notes() const;

 private:
  struct Item {
    std::shared_ptr<const FrameResult> result;
    std::shared_ptr<const Tensor> frame;
  };
  struct Output {
    std::shared_ptr<ResultSink> sink;
    std::unique_ptr<BoundedQueue<Item>> queue;
    std::atomic<int64_t> busy_ns{0};
    int64_t done = 0;  // frames added (or dropped after a failure); guarded by progress_m_
    std::thread thread;
  };
  void serve(Output& o);
  void wait_for_earlier(const Output& o, int64_t frames);
  void fail(const ResultSink& sink, const std::string& message);
  void throw_if_failed();
  void stop();

  std::vector<std::unique_ptr<Output>> outputs_;
  std::mutex m_;
  std::string error_;
  std::atomic<bool> failed_{false};
  std::mutex progress_m_;
  std::condition_variable progress_;
};

}  // namespace lingbot
