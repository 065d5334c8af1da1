// The source stage of a run: frames read ahead of the device by reader threads and handed out
// in frame order.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "lingbot/source.h"

namespace lingbot {

class FramePrefetch {
 public:
  // At most `ahead` frames are read but not yet taken; `threads` readers when the source may be
  // read concurrently, else one reading in order.
  FramePrefetch(FrameSource& source, int threads, int ahead);
  ~FramePrefetch();  // stops the readers; frames not taken are dropped
  FramePrefetch(const FramePrefetch&) = delete;
  FramePrefetch& operator=(const FramePrefetch&) = delete;

  // The next frame, nothing at the end; throws the source's Error at the frame it failed on,
  // after every frame before it.
  std::optional<Tensor> next();
  int threads() const { return static_cast<int>(readers_.size()); }

 private:
  void read();

  FrameSource& source_;
  const int64_t ahead_;
  std::mutex m_;
  std::condition_variable cv_;
  std::map<int64_t, Tensor> ready_;
  int64_t claimed_ = 0;      // frames handed to readers
  int64_t taken_ = 0;        // frames handed out by next()
  int64_t end_ = INT64_MAX;  // the first index the source has no frame for, or failed on
  std::string error_;        // the failure at end_, if it failed
  bool stopping_ = false;
  std::vector<std::thread> readers_;
};

}  // namespace lingbot
