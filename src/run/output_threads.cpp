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

void OutputThreads::serve(Output& o) {
  while (std::optional<Item> item = o.queue->pop()) {
    if (failed_) continue;  // drain: the run is stopping
    const auto t0 = std::chrono::steady_clock::now();
    try {
      o.sink->add(*item->result, item->frame.get());
    } catch (const std::exception& e) {
      fail(*o.sink, e.what());
    }
    o.busy_ns +=
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0)
            .count();
  }
}

void OutputThreads::fail(const ResultSink& sink, const std::string& message) {
  std::lock_guard<std::mutex> lock(m_);
  if (error_.empty()) error_ = "export " + sink.name() + " failed: " + message;
  failed_ = true;
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

}  // namespace lingbot
