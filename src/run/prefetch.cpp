#include "run/prefetch.h"

#include <algorithm>

#include "lingbot/error.h"

namespace lingbot {

FramePrefetch::FramePrefetch(FrameSource& source, int threads, int ahead)
    : source_(source), ahead_(std::max(ahead, 1)) {
  const int n = source.concurrent() ? std::max(threads, 1) : 1;
  for (int i = 0; i < n; ++i) readers_.emplace_back([this] { read(); });
}

FramePrefetch::~FramePrefetch() {
  {
    std::lock_guard<std::mutex> lock(m_);
    stopping_ = true;
  }
  cv_.notify_all();
  for (auto& t : readers_) t.join();
}

void FramePrefetch::read() {
  for (;;) {
    int64_t i;
    {
      std::unique_lock<std::mutex> lock(m_);
      // A reader claims the next frame only while the frames read ahead fit, so memory is
      // bounded by `ahead` frames whatever the readers' speed.
      cv_.wait(lock, [&] { return stopping_ || claimed_ >= end_ || claimed_ < taken_ + ahead_; });
      if (stopping_ || claimed_ >= end_) return;
      i = claimed_++;
    }
    std::optional<Tensor> frame;
    std::string error;
    try {
      frame = source_.get(i);
    } catch (const Error& e) {
      error = e.what();
    } catch (const std::exception& e) {  // bad_alloc and the like: still one line, not a crash
      error = "cannot read frame " + std::to_string(i) + ": " + e.what();
    }
    {
      std::lock_guard<std::mutex> lock(m_);
      if (frame) {
        ready_.emplace(i, std::move(*frame));
      } else if (i < end_) {  // the end, or a failure: the earliest one counts
        end_ = i;
        error_ = error;
      }
    }
    cv_.notify_all();
  }
}

std::optional<Tensor> FramePrefetch::next() {
  std::unique_lock<std::mutex> lock(m_);
  cv_.wait(lock, [&] { return ready_.count(taken_) || taken_ >= end_; });
  if (taken_ >= end_) {
    // Frames read past the end or the failure are dropped.
    if (!error_.empty()) throw Error(error_);
    return std::nullopt;
  }
  auto it = ready_.find(taken_);
  Tensor t = std::move(it->second);
  ready_.erase(it);
  ++taken_;
  lock.unlock();
  cv_.notify_all();
  return t;
}

}  // namespace lingbot
