#include "stream/scheduler.h"

namespace lingbot {

void StepScheduler::enqueue(SequenceState& seq, const Tensor& images01, StepMode mode) {
  Request req;
  req.part = {&seq, images01, mode};
  model_.validate(req.part);
  std::unique_lock<std::mutex> lock(mu_);
  waiting_.push_back(&req);
  while (!req.done) {
    if (running_) {
      cv_.wait(lock);
      continue;
    }
    // This thread runs the next batch (which may not hold its own step: then it goes again).
    std::vector<Request*> batch = take_batch();
    running_ = true;
    lock.unlock();
    std::vector<Model::Part> parts;
    for (const Request* r : batch) parts.push_back(r->part);
    std::exception_ptr error;
    try {
      model_.enqueue(parts);
    } catch (...) {
      error = std::current_exception();
    }
    lock.lock();
    for (Request* r : batch) {
      r->done = true;
      r->error = error;
    }
    ++counts_.steps;
    counts_.parts += static_cast<int64_t>(batch.size());
    running_ = false;
    cv_.notify_all();
  }
  if (req.error) std::rethrow_exception(req.error);
}

std::vector<StepScheduler::Request*> StepScheduler::take_batch() {
  std::vector<Request*> batch{waiting_.front()};
  waiting_.pop_front();
  const Tensor& first = batch[0]->part.images01;
  if (first.dim(0) > 1) return batch;
  for (auto it = waiting_.begin(); it != waiting_.end();) {
    const Tensor& im = (*it)->part.images01;
    if (im.dim(0) == 1 && im.dim(2) == first.dim(2) && im.dim(3) == first.dim(3)) {
      batch.push_back(*it);
      it = waiting_.erase(it);
    } else {
      ++it;
    }
  }
  return batch;
}

StepScheduler::Counts StepScheduler::counts() const {
  std::lock_guard<std::mutex> lock(mu_);
  return counts_;
}

}  // namespace lingbot
