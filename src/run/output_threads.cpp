#include "run/output_threads.h"

#include <chrono>

#include "lingbot/error.h"

namespace lingbot {

OutputThreads::OutputThreads(std::vector<std::shared_ptr<ResultSink>> sinks, int queue) {
  for (auto& s : sinks) {
    auto o = std::make_unique<Output>();
    o->sink = std::move(s);
    o->queue = std::make_unique<BoundedQueue<Item>>(static_cast<size_t>(std::max(queue, 1)));
    outputs_.push_back(std::move(o));
  }
  for (auto& o : outputs_) o->thread = std::thread([this, p = o.get()] { serve(*p); });
}

OutputThreads::~OutputThreads() {
  stop();
}

void OutputThreads::stop() {
  for (auto& o : outputs_) o->queue->close();
  for (auto& o : outputs_)
    if (o->thread.joinable()) o->thread.join();
}

// Every output gets every result in the same order, so the n-th item of each is one frame.
// Earlier outputs never wait for later ones, and the device thread queues a result for the
// earlier ones first, so the waiting cannot close a cycle.
void OutputThreads::wait_for_earlier(const Output& o, int64_t frames) {
  std::unique_lock<std::mutex> lock(progress_m_);
  progress_.wait(lock, [&] {
    if (failed_) return true;
    for (const auto& e : outputs_) {
      if (e.get() == &o) return true;
      if (e->done < frames) return false;
    }
    return true;
  });
}

void OutputThreads::serve(Output& o) {
  const bool after_earlier = o.sink->refers_to_earlier();
  int64_t n = 0;
  while (std::optional<Item> item = o.queue->pop()) {
    ++n;
    if (after_earlier) wait_for_earlier(o, n);
    if (!failed_) {  // else drain: the run is stopping
      const auto t0 = std::chrono::steady_clock::now();
      try {
        o.sink->add(*item->result, item->frame.get());
      } catch (const std::exception& e) {
        fail(*o.sink, e.what());
      }
      o.busy_ns += std::chrono::duration_cast<std::chrono::nanoseconds>(
                       std::chrono::steady_clock::now() - t0)
                       .count();
    }
    {
      std::lock_guard<std::mutex> lock(progress_m_);
      o.done = n;
    }
    progress_.notify_all();
  }
}

void OutputThreads::fail(const ResultSink& sink, const std::string& message) {
  std::lock_guard<std::mutex> lock(m_);
  if (error_.empty()) error_ = "export " + sink.name() + " failed: " + message;
  {
    std::lock_guard<std::mutex> progress_lock(progress_m_);  // seen by outputs waiting for this
    failed_ = true;
  }
  progress_.notify_all();
  // Wake the device thread should it wait for a full queue of this or another output.
  for (auto& o : outputs_) o->queue->close();
}

void OutputThreads::throw_if_failed() {
  if (!failed_) return;
  std::lock_guard<std::mutex> lock(m_);
  throw Error(error_);
}

void OutputThreads::add(std::shared_ptr<const FrameResult> result,
                        std::shared_ptr<const Tensor> frame) {
  throw_if_failed();
  for (auto& o : outputs_) o->queue->push({result, frame});
  throw_if_failed();
}

void OutputThreads::finish() {
  stop();
  throw_if_failed();
  for (auto& o : outputs_) {
    try {
      o->sink->finish();
    } catch (const std::exception& e) {
      fail(*o->sink, e.what());
    }
  }
  throw_if_failed();
}

std::vector<std::pair<std::string, double>> OutputThreads::busy() const {
  std::vector<std::pair<std::string, double>> b;
  for (const auto& o : outputs_) b.emplace_back(o->sink->name(), o->busy_ns * 1e-9);
  return b;
}

std::vector<std::string> OutputThreads::notes() const {
  std::vector<std::string> n;
  for (const auto& o : outputs_)
    if (std::string note = o->sink->notes(); !note.empty()) n.push_back(std::move(note));
  return n;
}

}  // namespace lingbot
