// Sessions pushed from several threads share steps (StepScheduler): each still gets the
// results it gets alone, in its frame order, on its own thread. Not bit for bit on the CPU
// (OpenBLAS rounds a GEMM row differently with the row count of the call, see
// batch_step_test.cpp): within 1e-5 relative, the fixtures' float32 tolerance being 1e-4; on
// the GPU within the fixtures' tolerances of its precision.
#include <gtest/gtest.h>

#include <algorithm>
#include <barrier>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "backend/ops.h"
#include "camera_streams.h"
#include "lingbot/engine.h"
#include "lingbot/error.h"
#include "model/model.h"
#include "stream/scheduler.h"
#include "stream/session.h"
#include "test_util.h"

namespace lingbot {
namespace {

using namespace test::streams;

TEST(BatchedSessions, TwoAndFourThreadsGetTheResultsOfEachAlone) {
  auto engine = Engine::create({.model = "synthetic:1", .arch = "tiny"});
  check_threads(*engine, 2);
  check_threads(*engine, 4);
}

// The scheduler itself, under sessions that push in rounds (a barrier between frames): the
// steps of a round arrive while the first of them runs, so they share steps, and every
// session's step is carried exactly once. `iterations`, per camera: its camera-head iterations
// (the head runs once per run of sessions with the same count in a step).
void check_rounds(const std::vector<int>& iterations) {
  auto backend = make_cpu_backend();
  WeightLoader weights(1, *backend);
  Model model(*backend, weights, ModelConfig::preset("tiny"));
  StepScheduler scheduler(model);
  std::vector<Camera> cams = cameras(iterations.size());
  for (size_t i = 0; i < cams.size(); ++i) {
    cams[i].frames.resize(9);
    cams[i].options.flow_threshold = 0;  // every streamed frame one step
    cams[i].options.camera_iterations = iterations[i];
  }
  std::vector<Results> alone, got(cams.size());
  for (const Camera& cam : cams) {
    StreamSession s(model, scheduler, cam.options);
    alone.emplace_back();
    push_all(s, cam, alone.back());
  }
  const StepScheduler::Counts before = scheduler.counts();
  EXPECT_EQ(before.steps, before.parts);  // one session at a time: nothing to batch

  std::barrier round(static_cast<std::ptrdiff_t>(cams.size()));
  std::vector<std::thread> threads;
  for (size_t i = 0; i < cams.size(); ++i)
    threads.emplace_back([&, i] {
      StreamSession s(model, scheduler, cams[i].options);
      const auto keep = [&](const FrameResult& r) { got[i].push_back(r); };
      for (const Tensor& f : cams[i].frames) {
        round.arrive_and_wait();
        s.push(f, keep);
      }
      s.finish(keep);
    });
  for (auto& t : threads) t.join();
  const StepScheduler::Counts after = scheduler.counts();
  // Each session: one phase-1 step, then one step a streamed frame.
  int64_t parts = 0;
  for (const Camera& cam : cams)
    parts += 1 + static_cast<int64_t>(cam.frames.size()) - cam.options.scale_frames;
  std::printf("%lld sequence steps in %lld model steps\n",
              static_cast<long long>(after.parts - before.parts),
              static_cast<long long>(after.steps - before.steps));
  EXPECT_EQ(after.parts - before.parts, parts);
  EXPECT_LT(after.steps - before.steps, parts) << "no two sessions ever shared a step";
  for (size_t i = 0; i < cams.size(); ++i)
    expect_same(got[i], alone[i], "camera " + std::to_string(i));
}

TEST(BatchedSessions, StepsOfSessionsReadyTogetherShareOneModelStep) {
  check_rounds({4, 4, 4, 4});
}

// Sessions whose camera heads iterate a different number of times share the transformer's step
// and run their camera heads in one call per run of equal counts.
TEST(BatchedSessions, SessionsWithOtherCameraIterationsShareSteps) {
  check_rounds({4, 2, 2, 4});
}

TEST(BatchedSessions, ARefusedFrameOnOneThreadLeavesTheOthersTheirResults) {
  auto engine = Engine::create({.model = "synthetic:1", .arch = "tiny"});
  const std::vector<Camera> cams = cameras(3);
  std::vector<Results> alone, got(cams.size());
  for (const Camera& cam : cams) alone.push_back(run_alone(*engine, cam));
  std::vector<std::thread> threads;
  for (size_t i = 0; i < cams.size(); ++i)
    threads.emplace_back([&, i] {
      auto s = engine->start(cams[i].options);
      if (i == 1) {
        // A first frame of a size the model cannot take fails in its own push (the scheduler
        // refuses it before it joins a step); the session then starts over with good frames.
        StreamOptions one = cams[i].options;
        one.scale_frames = 1;
        auto bad = engine->start(one);
        EXPECT_THROW(bad->push(Tensor::zeros({3, 29, 42}), [](const FrameResult&) {}), Error);
        EXPECT_THROW(s->push(Tensor::zeros({2, 28, 42}), [](const FrameResult&) {}), Error);
      }
      push_all(*s, cams[i], got[i]);
    });
  for (auto& t : threads) t.join();
  for (size_t i = 0; i < cams.size(); ++i)
    expect_same(got[i], alone[i], "camera " + std::to_string(i));
}

TEST(BatchedSessions, ResetAndDestroyOfOneSessionWhileOthersRun) {
  auto engine = Engine::create({.model = "synthetic:1", .arch = "tiny"});
  const std::vector<Camera> cams = cameras(4);
  std::vector<Results> alone, got(cams.size());
  for (const Camera& cam : cams) alone.push_back(run_alone(*engine, cam));
  std::vector<std::thread> threads;
  for (size_t i = 0; i < cams.size(); ++i)
    threads.emplace_back([&, i] {
      const auto drop = [](const FrameResult&) {};
      if (i == 2) {  // half a sequence, then reset: the sequence after it is as if alone
        auto s = engine->start(cams[i].options);
        for (size_t t = 0; t < 7; ++t) s->push(cams[i].frames[t], drop);
        s->reset();
        push_all(*s, cams[i], got[i]);
        return;
      }
      if (i == 3) {  // destroyed with a step perhaps in flight, then a new session
        {
          auto s = engine->start(cams[i].options);
          for (size_t t = 0; t < 6; ++t) s->push(cams[i].frames[t], drop);
        }
        got[i] = run_alone(*engine, cams[i]);
        return;
      }
      push_all(*engine->start(cams[i].options), cams[i], got[i]);
    });
  for (auto& t : threads) t.join();
  for (size_t i = 0; i < cams.size(); ++i)
    expect_same(got[i], alone[i], "camera " + std::to_string(i));
}

}  // namespace
}  // namespace lingbot
