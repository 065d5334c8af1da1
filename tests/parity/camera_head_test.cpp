// Camera head against the reference: each streaming call's camera tokens through the head and
// its cache, keyframes storing and non-keyframes not, compared with the fixture's pose_enc.
#include "model/camera_head.h"

#include <gtest/gtest.h>

#include <cstring>
#include <utility>
#include <vector>

#include "backend/ops.h"
#include "cache/camera_cache.h"
#include "heads_fixture.h"
#include "lingbot/error.h"
#include "model/weight_loader.h"

namespace lingbot {
namespace {

constexpr double kTolerance = 1e-4;  // fixtures/README.md, float32 on tiny/
constexpr int kIterations = 4;

// Token 0 of every frame of the last emitted layer: [F, T, 2C] -> [F, 2C].
Tensor camera_tokens(const Tensor& layer) {
  const int64_t frames = layer.dim(0), width = layer.dim(2);
  Tensor out = Tensor::zeros({frames, width});
  for (int64_t f = 0; f < frames; ++f)
    std::memcpy(out[f].raw(), layer[f][0].raw(), static_cast<size_t>(width) * sizeof(float));
  return out;
}

struct Run {
  Tensor pose;  // [frames, 9]
  int64_t cached = 0;
};

// keyframe_interval k: streamed frame i is a keyframe iff (i - scale_frames) % k == 0.
Run stream(const test::TinyStream& fx, int keyframe_interval) {
  auto be = make_cpu_backend();
  WeightLoader loader(fx.seed(), *be);
  CameraHead head;
  head.load(loader, fx.camera_config());
  CameraCache cache = head.make_cache(*be, kIterations);

  Run run;
  run.pose = Tensor::zeros({fx.total_frames, 9});
  for (int call = 0; call < fx.calls(); ++call) {
    const int first = fx.first_frame(call);
    const bool store = call == 0 || (first - fx.scale_frames) % keyframe_interval == 0;
    const int64_t before = cache.rows();
    const Tensor tokens = be->upload(camera_tokens(fx.tokens(call, 3)), DType::F32);
    const Tensor pose = head.run(*be, tokens, cache, store, kIterations);
    EXPECT_EQ(cache.rows(), before + (store ? tokens.dim(0) : 0)) << "call " << call;
    std::memcpy(run.pose[first].raw(), pose.raw(), pose.nbytes());
  }
  run.cached = cache.rows();
  return run;
}

void check(const std::string& name, int keyframe_interval, int64_t expect_cached) {
  const test::TinyStream fx(name);
  const Run run = stream(fx, keyframe_interval);
  EXPECT_EQ(run.cached, expect_cached);
  const Tensor& want = fx.get("pose_enc");
  const test::Agreement a = test::compare(run.pose, want);
  EXPECT_LE(a.relative(), kTolerance) << name;
  for (int f = 0; f < fx.total_frames; ++f) {
    const test::Agreement row = test::compare(run.pose[f], want[f]);
    EXPECT_LE(row.max_abs_err, kTolerance * a.max_abs_ref) << name << " frame " << f;
  }
  std::printf("[ parity   ] %s pose_enc %.3g (max abs %.3g of %.3g)\n", name.c_str(), a.relative(),
              a.max_abs_err, a.max_abs_ref);
}

TEST(CameraHeadParity, TinyKeyframeInterval1) {
  check("stream_kf1", 1, 16);
}

// Frames 4, 7, 10, 13 are keyframes; the others attend to the cache and leave it unchanged.
TEST(CameraHeadParity, TinyKeyframeInterval3) {
  check("stream_kf3", 3, 4 + 4);
}

// Storing a frame and rolling it back must equal attending without storing.
TEST(CameraHead, RollbackMatchesNonStoringCall) {
  const test::TinyStream fx("stream_kf1");
  auto be = make_cpu_backend();
  WeightLoader loader(fx.seed(), *be);
  CameraHead head;
  head.load(loader, fx.camera_config());
  CameraCache cache = head.make_cache(*be, kIterations);
  head.run(*be, camera_tokens(fx.tokens(0, 3)), cache, true);
  const size_t in_use = cache.bytes_in_use();
  EXPECT_EQ(in_use, static_cast<size_t>(kIterations * 4 * 2 * fx.scale_frames * fx.dim_in()) *
                        sizeof(float));
  EXPECT_GE(cache.bytes_reserved(), in_use);

  const Tensor tokens = camera_tokens(fx.tokens(1, 3));
  const Tensor looked = head.run(*be, tokens, cache, false);
  EXPECT_EQ(cache.rows(), fx.scale_frames);
  const Tensor stored = head.run(*be, tokens, cache, true);
  EXPECT_EQ(cache.rows(), fx.scale_frames + 1);
  EXPECT_EQ(test::compare(looked, stored).max_abs_err, 0.0);
  cache.rollback_last_frame();
  EXPECT_EQ(cache.rows(), fx.scale_frames);
  EXPECT_EQ(cache.bytes_in_use(), in_use);

  const Tensor again = head.run(*be, tokens, cache, false);
  EXPECT_EQ(test::compare(looked, again).max_abs_err, 0.0);
  cache.reset();
  EXPECT_EQ(cache.rows(), 0);
  EXPECT_EQ(cache.bytes_in_use(), 0u);
}

// One call over the frames of several sequences (a batched step) gives each sequence what a call
// of its own gives, and stores into each cache what its own call stores. Not bit for bit:
// OpenBLAS rounds a GEMM row differently with the row count of the call.
TEST(CameraHead, OneCallOverSeveralCachesEqualsOneCallEach) {
  const test::TinyStream fx("stream_kf1");
  auto be = make_cpu_backend();
  WeightLoader loader(fx.seed(), *be);
  CameraHead head;
  head.load(loader, fx.camera_config());
  const Tensor t0 = camera_tokens(fx.tokens(0, 3)), t1 = camera_tokens(fx.tokens(1, 3)),
               t2 = camera_tokens(fx.tokens(2, 3));
  // Sequence a: its first call (the scale frames, stored); b: a streamed frame that is not
  // stored; c: a streamed keyframe, stored.
  auto prepare = [&](int calls_before) {
    CameraCache cache = head.make_cache(*be, kIterations);
    if (calls_before >= 1) head.run(*be, t0, cache, true);
    if (calls_before >= 2) head.run(*be, t1, cache, true);
    return cache;
  };
  CameraCache a1 = prepare(0), b1 = prepare(1), c1 = prepare(2);
  const Tensor pa = head.run(*be, t0, a1, true), pb = head.run(*be, t1, b1, false),
               pc = head.run(*be, t2, c1, true);

  CameraCache a = prepare(0), b = prepare(1), c = prepare(2);
  const int64_t sa = t0.dim(0);
  Tensor tokens = Tensor::zeros({sa + 2, t0.dim(1)});
  std::memcpy(tokens.raw(), t0.raw(), t0.nbytes());
  std::memcpy(tokens[sa].raw(), t1.raw(), t1.nbytes());
  std::memcpy(tokens[sa + 1].raw(), t2.raw(), t2.nbytes());
  const std::vector<CameraPart> parts{{&a, sa, true}, {&b, 1, false}, {&c, 1, true}};
  Tensor pose = be->download(head.enqueue(*be, tokens, parts, kIterations)).to(DType::F32);
  CameraHead::apply_pose_activation(pose.f32(), pose.dim(0));
  EXPECT_EQ(a.rows(), a1.rows());
  EXPECT_EQ(b.rows(), b1.rows());
  EXPECT_EQ(c.rows(), c1.rows());
  const std::vector<std::pair<Tensor, Tensor>> pairs{
      {pose.slice(0, sa), pa}, {pose.slice(sa, sa + 1), pb}, {pose.slice(sa + 1, sa + 2), pc}};
  for (const auto& [got, want] : pairs) EXPECT_LE(test::compare(got, want).relative(), 1e-5);
  // What each call stored: the next frame through each cache, alone.
  const Tensor t3 = camera_tokens(fx.tokens(3, 3));
  for (auto [mine, theirs] : {std::pair{&a, &a1}, {&b, &b1}, {&c, &c1}})
    EXPECT_LE(test::compare(head.run(*be, t3, *mine, false), head.run(*be, t3, *theirs, false))
                  .relative(),
              1e-5);

  // Parts that do not add up to the tokens, or caches of two dtypes, are refused.
  const std::vector<CameraPart> short_parts{{&b, 1, false}};
  EXPECT_THROW(head.enqueue(*be, tokens, short_parts, kIterations), Error);
  CameraCache other = head.make_cache(*be, kIterations, DType::BF16);
  const std::vector<CameraPart> mixed{{&a, sa, false}, {&other, 2, false}};
  EXPECT_THROW(head.enqueue(*be, tokens, mixed, kIterations), Error);
}

}  // namespace
}  // namespace lingbot
