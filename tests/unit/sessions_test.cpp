// Sessions of one engine are independent: two sequences pushed alternately, frame by frame, or
// from two threads at once, get exactly the results each gets alone.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <thread>
#include <vector>

#include "backend/ops.h"
#include "io/image.h"
#include "io/preprocess.h"
#include "lingbot/engine.h"
#include "lingbot/error.h"
#include "test_util.h"
#include "tiny_frames.h"

namespace lingbot {
namespace {

using Results = std::vector<FrameResult>;

Results run_alone(Engine& engine, const StreamOptions& options, const std::vector<Tensor>& seq) {
  Results out;
  auto session = engine.start(options);
  const auto keep = [&](const FrameResult& r) { out.push_back(r); };
  for (const Tensor& f : seq) session->push(f, keep);
  session->finish(keep);
  return out;
}

void expect_same(const Results& got, const Results& alone, const char* what) {
  ASSERT_EQ(got.size(), alone.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    SCOPED_TRACE(std::string(what) + ", frame " + std::to_string(i));
    EXPECT_EQ(got[i].index, alone[i].index);
    EXPECT_EQ(got[i].keyframe, alone[i].keyframe);
    const std::vector<float> pg(got[i].pose_enc.begin(), got[i].pose_enc.end()),
        pa(alone[i].pose_enc.begin(), alone[i].pose_enc.end());
    EXPECT_LE(test::compare(pg, pa).relative(), 1e-5);
    ASSERT_EQ(got[i].depth.size(), alone[i].depth.size());
    EXPECT_LE(test::compare(got[i].depth, alone[i].depth).relative(), 1e-5);
    EXPECT_LE(test::compare(got[i].confidence, alone[i].confidence).relative(), 1e-5);
  }
}

// Two cameras on one loaded model: sequence A is the fixture's frames, B the same frames in
// reverse with other stream options, so that their caches differ at every step.
struct TwoCameras {
  std::vector<Tensor> a, b;
  StreamOptions oa{.scale_frames = 4, .window = 6};
  StreamOptions ob{.scale_frames = 3, .window = 4, .keyframe_interval = 2};
  TwoCameras() {
    a = test::tiny_frames();
    a.resize(12);  // eviction, the special stream and B's non-keyframes all happen by then
    b.assign(a.rbegin(), a.rend());
  }
};

void check_interleaved(Engine& engine, const StreamOptions& oa, const StreamOptions& ob) {
  TwoCameras cams;
  const Results alone_a = run_alone(engine, oa, cams.a), alone_b = run_alone(engine, ob, cams.b);
  ASSERT_EQ(alone_a.size(), cams.a.size());

  Results ra, rb;
  auto sa = engine.start(oa), sb = engine.start(ob);
  const auto keep_a = [&](const FrameResult& r) { ra.push_back(r); };
  const auto keep_b = [&](const FrameResult& r) { rb.push_back(r); };
  for (size_t i = 0; i < cams.a.size(); ++i) {
    sa->push(cams.a[i], keep_a);
    sb->push(cams.b[i], keep_b);
  }
  sa->finish(keep_a);
  sb->finish(keep_b);
  expect_same(ra, alone_a, "A interleaved");
  expect_same(rb, alone_b, "B interleaved");
}

// flush after every push: the scale frames stay buffered until the last of them, then every
// frame's result is out when flush returns, the sequence goes on, and the results are those of
// pushes alone.
void check_flush(Engine& engine) {
  TwoCameras cams;
  const Results alone = run_alone(engine, cams.oa, cams.a);
  Results got;
  auto s = engine.start(cams.oa);
  const auto keep = [&](const FrameResult& r) { got.push_back(r); };
  for (size_t i = 0; i < cams.a.size(); ++i) {
    s->push(cams.a[i], keep);
    s->flush(keep);
    const size_t want = i + 1 < static_cast<size_t>(cams.oa.scale_frames) ? 0 : i + 1;
    ASSERT_EQ(got.size(), want) << "after frame " << i;
  }
  s->finish(keep);
  EXPECT_EQ(got.size(), cams.a.size());
  expect_same(got, alone, "flushed after every push");
}

TEST(Sessions, FlushDeliversEveryPushedFrameAndTheSequenceGoesOn) {
  auto engine = Engine::create({.model = "synthetic:1", .arch = "tiny"});
  check_flush(*engine);
}

TEST(Sessions, InterleavedPushesGetTheResultsOfEachSequenceAlone) {
  auto engine = Engine::create({.model = "synthetic:1", .arch = "tiny"});
  TwoCameras cams;
  check_interleaved(*engine, cams.oa, cams.ob);
}

TEST(Sessions, AdaptiveKeyframesInterleavedWithAFixedInterval) {
  auto engine = Engine::create({.model = "synthetic:1", .arch = "tiny"});
  TwoCameras cams;
  StreamOptions adaptive = cams.ob;
  adaptive.flow_threshold = 0.5f;
  adaptive.max_non_keyframe_gap = 3;
  check_interleaved(*engine, cams.oa, adaptive);
}

TEST(Sessions, TwoThreadsPushingTheirOwnSessionsGetTheResultsOfEachAlone) {
  auto engine = Engine::create({.model = "synthetic:1", .arch = "tiny"});
  TwoCameras cams;
  const Results alone_a = run_alone(*engine, cams.oa, cams.a);
  const Results alone_b = run_alone(*engine, cams.ob, cams.b);
  Results ra, rb;
  std::thread ta([&] { ra = run_alone(*engine, cams.oa, cams.a); });
  std::thread tb([&] { rb = run_alone(*engine, cams.ob, cams.b); });
  ta.join();
  tb.join();
  expect_same(ra, alone_a, "A on its thread");
  expect_same(rb, alone_b, "B on its thread");
}

TEST(Sessions, ARefusedFrameOfOneSequenceLeavesTheOtherUntouched) {
  auto engine = Engine::create({.model = "synthetic:1", .arch = "tiny"});
  TwoCameras cams;
  const Results alone_a = run_alone(*engine, cams.oa, cams.a);
  Results ra;
  auto sa = engine->start(cams.oa), sb = engine->start(cams.ob);
  const auto keep_a = [&](const FrameResult& r) { ra.push_back(r); };
  const auto drop = [](const FrameResult&) {};
  for (size_t i = 0; i < cams.a.size(); ++i) {
    sa->push(cams.a[i], keep_a);
    if (i == 5) {  // B's frame of another size is refused; B's and A's state stay as they were
      EXPECT_THROW(sb->push(Tensor::zeros({3, 28, 42}), drop), Error);
    } else {
      sb->push(cams.b[i], drop);
    }
  }
  sa->finish(keep_a);
  expect_same(ra, alone_a, "A beside a failing B");
}

TEST(Devices, NamesOfDevices) {
  EXPECT_EQ(cuda_device_index("cuda"), 0);
  EXPECT_EQ(cuda_device_index("cuda:0"), 0);
  EXPECT_EQ(cuda_device_index("cuda:12"), 12);
  for (const char* bad : {"cpu", "cuda:", "cuda:x", "cuda:-1", "cuda:1x", "gpu", "cuda:0000"})
    EXPECT_EQ(cuda_device_index(bad), -1) << bad;
  EXPECT_TRUE(is_cuda_device("cuda:3"));
  EXPECT_FALSE(is_cuda_device("CUDA"));
  try {
    Engine::create({.model = "synthetic:1", .arch = "tiny", .device = "gpu"});
    FAIL() << "device gpu was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "unknown device 'gpu' (expected cpu, cuda or cuda:N)");
  }
}

// The GPU path's three names; anything else is refused with one line, on the CPU device too.
TEST(Devices, NamesOfGpuPaths) {
  EXPECT_EQ(parse_gpu_path("auto"), GpuPath::kAuto);
  EXPECT_EQ(parse_gpu_path("hopper"), GpuPath::kHopper);
  EXPECT_EQ(parse_gpu_path("portable"), GpuPath::kPortable);
  for (const char* bad : {"", "Auto", "sm_80", "portable "}) {
    try {
      parse_gpu_path(bad);
      FAIL() << "GPU path '" << bad << "' was accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument);
      EXPECT_EQ(std::string(e.what()),
                "unknown GPU path '" + std::string(bad) + "' (auto, hopper or portable)");
    }
  }
  EXPECT_THROW(
      Engine::create(
          {.model = "synthetic:1", .arch = "tiny", .device = "cpu", .gpu_path = "fastest"}),
      Error);
}

TEST(GpuSessions, InterleavedPushesGetTheResultsOfEachSequenceAlone) {
  std::string why;
  if (!make_cuda_backend(&why)) GTEST_SKIP() << "no CUDA backend: " << why;
  // "auto": the fp8 KV cache where the GPU reads it, each session with scales of its own.
  for (const char* precision : {"f32", "bf16", "auto"}) {
    SCOPED_TRACE(precision);
    auto engine = Engine::create(
        {.model = "synthetic:1", .arch = "tiny", .device = "cuda", .precision = precision});
    TwoCameras cams;
    check_interleaved(*engine, cams.oa, cams.ob);
    StreamOptions adaptive = cams.ob;
    adaptive.flow_threshold = 0.5f;
    check_interleaved(*engine, cams.oa, adaptive);
    check_flush(*engine);  // on the GPU the result is otherwise still on the device
  }
}

}  // namespace
}  // namespace lingbot
