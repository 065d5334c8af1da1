// The run's output stage: every export on its own thread, and an export whose files name another
// export's files adds a frame only after every export before it has.
#include "run/output_threads.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>

#include "lingbot/error.h"

namespace lingbot {
namespace {

// Counts the frames it has added; sleeps first, so that a later export would overtake it, or,
// given a gate, holds its first frame until the gate opens.
class SlowSink : public ResultSink {
 public:
  struct Gate {
    std::mutex m;
    std::condition_variable cv;
    bool open = false;
    void release() {
      {
        std::lock_guard<std::mutex> lock(m);
        open = true;
      }
      cv.notify_all();
    }
  };
  SlowSink(std::atomic<int64_t>& added, int throw_at = -1, Gate* gate = nullptr)
      : added_(added), throw_at_(throw_at), gate_(gate) {}
  void add(const FrameResult& r, const Tensor*) override {
    if (gate_) {
      std::unique_lock<std::mutex> lock(gate_->m);
      gate_->cv.wait(lock, [&] { return gate_->open; });
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    if (r.index == throw_at_) throw Error("disk full");
    added_ = r.index + 1;
  }
  void finish() override {}
  std::string name() const override { return "slow"; }

 private:
  std::atomic<int64_t>& added_;
  const int64_t throw_at_;
  Gate* const gate_;
};

// Records, for every frame, how many frames the slow export had added by then.
class ListingSink : public ResultSink {
 public:
  ListingSink(const std::atomic<int64_t>& earlier, bool ordered)
      : earlier_(earlier), ordered_(ordered) {}
  void add(const FrameResult& r, const Tensor*) override {
    seen.emplace_back(r.index, earlier_.load());
    if (after_add) after_add();
  }
  void finish() override { finished = true; }
  bool refers_to_earlier() const override { return ordered_; }
  std::string name() const override { return "listing"; }

  std::vector<std::pair<int64_t, int64_t>> seen;
  bool finished = false;
  std::function<void()> after_add;

 private:
  const std::atomic<int64_t>& earlier_;
  const bool ordered_;
};

std::shared_ptr<const FrameResult> frame(int64_t index) {
  auto r = std::make_shared<FrameResult>();
  r->index = index;
  return r;
}

TEST(OutputThreads, AnExportThatRefersToEarlierOnesWaitsForThem) {
  std::atomic<int64_t> added{0};
  auto slow = std::make_shared<SlowSink>(added);
  auto listing = std::make_shared<ListingSink>(added, true);
  OutputThreads out({slow, listing}, 4);
  const int64_t n = 40;
  for (int64_t i = 0; i < n; ++i) out.add(frame(i), nullptr);
  out.finish();
  ASSERT_EQ(listing->seen.size(), size_t(n));
  for (int64_t i = 0; i < n; ++i) {
    EXPECT_EQ(listing->seen[i].first, i);
    EXPECT_GE(listing->seen[i].second, i + 1) << "frame " << i << " listed before it was written";
  }
  EXPECT_TRUE(listing->finished);
}

TEST(OutputThreads, OtherExportsRunAhead) {
  // Without the ordering the fast export is not held back: it adds every frame while the slow
  // one still holds its first (the point of one thread each).
  std::atomic<int64_t> added{0};
  SlowSink::Gate gate;
  auto slow = std::make_shared<SlowSink>(added, -1, &gate);
  auto listing = std::make_shared<ListingSink>(added, false);
  const int64_t n = 8;
  listing->after_add = [&] {
    if (int64_t(listing->seen.size()) == n) gate.release();
  };
  OutputThreads out({slow, listing}, n);
  for (int64_t i = 0; i < n; ++i) out.add(frame(i), nullptr);
  out.finish();
  ASSERT_EQ(listing->seen.size(), size_t(n));
  for (const auto& [index, earlier] : listing->seen) EXPECT_EQ(earlier, 0) << index;
  EXPECT_EQ(added, n);
}

TEST(OutputThreads, AFailureBeforeAWaitingExportEndsTheRun) {
  std::atomic<int64_t> added{0};
  auto slow = std::make_shared<SlowSink>(added, 5);
  auto listing = std::make_shared<ListingSink>(added, true);
  OutputThreads out({slow, listing}, 2);
  std::string message;
  try {
    for (int64_t i = 0; i < 100; ++i) out.add(frame(i), nullptr);
    out.finish();
  } catch (const Error& e) {
    message = e.what();
  }
  EXPECT_NE(message.find("export slow failed: disk full"), std::string::npos) << message;
  for (const auto& [index, earlier] : listing->seen) EXPECT_GE(earlier, index + 1);
  EXPECT_LE(listing->seen.size(), 5u);
}

}  // namespace
}  // namespace lingbot
