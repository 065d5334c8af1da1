// Sessions pushed from several threads share steps on the GPU too: each gets the results it
// gets alone within the fixtures' tolerances of its precision.
#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <vector>

#include "backend/ops.h"
#include "camera_streams.h"
#include "lingbot/engine.h"
#include "lingbot/error.h"

namespace lingbot {
namespace {

using namespace test::streams;

// On the GPU the rows of a batch may take other GEMM kernels than a step alone: each session
// within the fixtures' tolerances of its precision (float32 1e-3; bf16 3e-2 on pose, 2e-2 on
// depth and confidence).
TEST(GpuSessions, TwoAndFourThreadsGetTheResultsOfEachAlone) {
  std::string why;
  if (!make_cuda_backend(&why)) GTEST_SKIP() << "no CUDA backend: " << why;
  for (const char* precision : {"f32", "bf16"}) {
    SCOPED_TRACE(precision);
    const bool bf16 = std::string(precision) == "bf16";
    const Tolerance tol = bf16 ? Tolerance{3e-2, 2e-2} : Tolerance{1e-3, 1e-3};
    auto engine = Engine::create(
        {.model = "synthetic:1", .arch = "tiny", .device = "cuda", .precision = precision});
    check_threads(*engine, 2, tol);
    check_threads(*engine, 4, tol);
  }
}

TEST(GpuSessions, ResetAndDestroyOfOneSessionWhileOthersRun) {
  std::string why;
  if (!make_cuda_backend(&why)) GTEST_SKIP() << "no CUDA backend: " << why;
  auto engine = Engine::create({.model = "synthetic:1", .arch = "tiny", .device = "cuda"});
  const std::vector<Camera> cams = cameras(3);
  std::vector<Results> alone, got(cams.size());
  for (const Camera& cam : cams) alone.push_back(run_alone(*engine, cam));
  std::vector<std::thread> threads;
  for (size_t i = 0; i < cams.size(); ++i)
    threads.emplace_back([&, i] {
      const auto drop = [](const FrameResult&) {};
      auto s = engine->start(cams[i].options);
      if (i == 1) {
        for (size_t t = 0; t < 7; ++t) s->push(cams[i].frames[t], drop);
        s->reset();
      } else if (i == 2) {
        auto gone = engine->start(cams[i].options);
        for (size_t t = 0; t < 6; ++t) gone->push(cams[i].frames[t], drop);
      }
      push_all(*s, cams[i], got[i]);
    });
  for (auto& t : threads) t.join();
  for (size_t i = 0; i < cams.size(); ++i)
    expect_same(got[i], alone[i], "camera " + std::to_string(i), {3e-2, 2e-2});
}

// One engine per GPU, the sessions of each pushed from their own threads, all at once: every
// thread must queue on its own engine's device (a session's results equal its results alone).
TEST(GpuSessions, EnginesOnTwoDevicesRunTogether) {
  std::string why;
  if (!make_cuda_backend(1, &why)) GTEST_SKIP() << "no second CUDA device: " << why;
  std::vector<std::unique_ptr<Engine>> engines;
  for (const char* device : {"cuda:0", "cuda:1"})
    engines.push_back(Engine::create({.model = "synthetic:1", .arch = "tiny", .device = device}));
  const std::vector<Camera> cams = cameras(4);
  std::vector<Results> alone, got(cams.size());
  for (size_t i = 0; i < cams.size(); ++i) alone.push_back(run_alone(*engines[i % 2], cams[i]));
  std::vector<std::thread> threads;
  for (size_t i = 0; i < cams.size(); ++i)
    threads.emplace_back(
        [&, i] { push_all(*engines[i % 2]->start(cams[i].options), cams[i], got[i]); });
  for (auto& t : threads) t.join();
  for (size_t i = 0; i < cams.size(); ++i)
    expect_same(got[i], alone[i], "camera " + std::to_string(i), {3e-2, 2e-2});
  EXPECT_GT(engines[1]->device_memory_used(), 0u);
}

TEST(GpuSessions, ADeviceThatIsNotThereIsOneLine) {
  std::string why;
  if (!make_cuda_backend(&why)) GTEST_SKIP() << "no CUDA backend: " << why;
  try {
    Engine::create({.model = "synthetic:1", .arch = "tiny", .device = "cuda:99"});
    FAIL() << "cuda:99 was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no CUDA device 99"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace lingbot
