// The background optimizer: many quick adds from the stream's thread while it solves, readers of
// the corrections on a third thread, the reports' order, the final result equal to a
// synchronous solve of the same graph, shutdown during a solve, and bad calls.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>

#include "lingbot/error.h"
#include "lingbot/loop.h"
#include "unit/loop_test_util.h"

namespace lingbot {
namespace {

#define SKIP_WITHOUT_CERES() \
  if (!loop_closure_available()) GTEST_SKIP() << "built without Ceres"

TEST(LoopCloser, StreamAddsWhileItSolvesAndTheCorrectionsStayConsistent) {
  SKIP_WITHOUT_CERES();
  const loop_test::Trajectory tr = loop_test::make_trajectory(600, 2, 0.003, 0.0005, 21);
  std::mt19937 rng(22);
  std::mutex reports_m;
  std::vector<LoopReport> reports;
  // The first report holds the worker (inside its first solve's publication) until the stream
  // has added everything: were an add to wait for the worker, the stream would never finish and
  // the hold would time out.
  std::atomic<bool> stream_done{false}, held_until_done{false};
  LoopCloser closer({}, [&](const LoopReport& r) {
    if (r.version == 1) {
      const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
      while (!stream_done && std::chrono::steady_clock::now() < until)
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      held_until_done = stream_done.load();
    }
    std::lock_guard<std::mutex> lock(reports_m);
    reports.push_back(r);
  });
  // A reader on its own thread, as a viewer or exporter would be: every snapshot is whole
  // (sorted nodes, one correction each) and versions never go back.
  std::atomic<bool> done{false};
  std::atomic<int64_t> reads{0};
  std::thread reader([&] {
    int64_t last = 0;
    while (!done) {
      const std::shared_ptr<const PoseCorrections> c = closer.corrections();
      ASSERT_NE(c, nullptr);
      ASSERT_EQ(c->nodes.size(), c->corrections.size());
      ASSERT_TRUE(std::is_sorted(c->nodes.begin(), c->nodes.end()));
      ASSERT_GE(c->version, last);
      last = c->version;
      const Sim3 p = c->correct(599, tr.streamed[599]);
      ASSERT_TRUE(std::isfinite(p.t[0]) && p.s > 0);
      ++reads;
    }
  });
  // The stream: a keyframe at a time, a loop every 10th keyframe of the second lap.
  PoseGraph reference;
  for (int i = 0; i < 600; ++i) {
    closer.add_keyframe(i, tr.streamed[i]);
    reference.add_node(i, tr.streamed[i]);
    if (i >= 300 && i % 10 == 0) {
      const PoseEdge l = loop_test::true_loop(tr, i - 300, i, rng, 0.005, 0.05, 0.01);
      closer.add_loop(l);
      reference.add_loop(l);
    }
  }
  stream_done = true;
  closer.finish();
  EXPECT_TRUE(held_until_done) << "an add waited for the worker";
  done = true;
  reader.join();
  EXPECT_EQ(closer.error(), "");
  EXPECT_GT(reads.load(), 0);

  std::lock_guard<std::mutex> lock(reports_m);
  ASSERT_FALSE(reports.empty());
  EXPECT_EQ(static_cast<int64_t>(reports.size()), closer.solves());
  // Fewer solves than loops when loops arrived during a solve; every loop reported once.
  size_t loops_reported = 0;
  for (size_t k = 0; k < reports.size(); ++k) {
    EXPECT_EQ(reports[k].version, static_cast<int64_t>(k + 1));
    loops_reported += reports[k].new_loops.size();
    for (const LoopOutcome& o : reports[k].new_loops) EXPECT_EQ(o.score, 100);
  }
  EXPECT_EQ(loops_reported, 30u);
  EXPECT_EQ(reports.back().nodes, 600);
  EXPECT_EQ(reports.back().summary.accepted, 30);

  // The published result is the synchronous solve's (the worker started from its earlier
  // solutions, the reference from the stream: the same optimum).
  reference.optimize();
  const std::shared_ptr<const PoseCorrections> c = closer.corrections();
  ASSERT_EQ(c->nodes.size(), 600u);
  std::vector<loop_test::V3> mine, theirs;
  for (int i = 0; i < 600; ++i) {
    mine.push_back(c->correct(i, tr.streamed[i]).t);
    theirs.push_back(reference.estimate(i).t);
  }
  double worst = 0;
  for (int i = 0; i < 600; ++i)
    for (int k = 0; k < 3; ++k) worst = std::max(worst, std::abs(mine[i][k] - theirs[i][k]));
  EXPECT_LT(worst, 1e-3);
  // And it removed the drift.
  const double before =
      loop_test::ate(loop_test::positions(tr.streamed), loop_test::positions(tr.truth));
  EXPECT_LT(loop_test::ate(mine, loop_test::positions(tr.truth)), 0.2 * before);
}

TEST(LoopCloser, ShutsDownDuringASolveAndWithNothingToDo) {
  SKIP_WITHOUT_CERES();
  { LoopCloser idle; }  // no loop ever: the thread just stops
  const loop_test::Trajectory tr = loop_test::make_trajectory(600, 2, 0.003, 0.0005, 5);
  std::mt19937 rng(6);
  const auto t0 = std::chrono::steady_clock::now();
  {
    LoopCloser closer;
    for (int i = 0; i < 600; ++i) closer.add_keyframe(i, tr.streamed[i]);
    for (int i = 300; i < 600; i += 10)
      closer.add_loop(loop_test::true_loop(tr, i - 300, i, rng, 0.005, 0.05, 0.01));
  }  // destroyed while (most likely) solving: cancelled, joined
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 30);
}

TEST(LoopCloser, BadCallsThrowOnTheCallersThread) {
  SKIP_WITHOUT_CERES();
  LoopCloser closer;
  closer.add_keyframe(0, Sim3{});
  EXPECT_THROW(closer.add_keyframe(0, Sim3{}), Error);
  closer.add_keyframe(4, Sim3{});
  EXPECT_THROW(closer.add_loop({0, 3, Sim3{}, 0}), Error);  // 3 is not a node
  EXPECT_THROW(closer.add_loop({4, 4, Sim3{}, 0}), Error);
  Sim3 bad;
  bad.s = 0;
  EXPECT_THROW(closer.add_loop({0, 4, bad, 0}), Error);
  // Nothing was queued by the failed calls.
  closer.finish();
  EXPECT_EQ(closer.solves(), 0);
  EXPECT_TRUE(closer.corrections()->empty());
}

TEST(LoopCloser, WithoutCeresSaysSo) {
  if (loop_closure_available()) GTEST_SKIP() << "built with Ceres";
  EXPECT_THROW(LoopCloser{}, Error);
}

}  // namespace
}  // namespace lingbot
