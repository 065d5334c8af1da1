// The whole streaming model against the reference on the tiny fixture model (float32,
// tolerance 1e-4 relative per tensor, fixtures/README.md).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "backend/ops.h"
#include "io/image.h"
#include "io/preprocess.h"
#include "lingbot/engine.h"
#include "model/model.h"
#include "stream/session.h"
#include "test_util.h"
#include "tiny_frames.h"
#include "weights/safetensors.h"

namespace lingbot {
namespace {

constexpr double kTol = 1e-4;

// Drives the model call by call as the reference does and checks every call's emitted
// aggregator layers, so that a mismatch points at its layer and call.
void check_scenario(const std::string& file, int keyframe_interval) {
  const auto want = read_safetensors(test::fixtures_dir() + "/tiny/" + file).tensors;
  auto backend = make_cpu_backend();
  WeightLoader weights(1, *backend);
  Model model(*backend, weights, ModelConfig::preset("tiny"));
  const auto frames = test::tiny_frames();
  ASSERT_EQ(frames.size(), 16u);
  const int scale = 4, window = 6;
  const int64_t h = frames[0].dim(1), w = frames[0].dim(2);
  SequenceState seq(
      model, sequence_config(model.config(), h, w, {.scale_frames = scale, .window = window}));

  std::vector<float> pose, depth, conf;
  size_t begin = 0;
  for (int call = 0; begin < frames.size(); ++call) {
    const size_t end = call == 0 ? scale : begin + 1;
    const bool key = call == 0 || StreamSession::is_keyframe(begin, scale, keyframe_interval);
    Model::Output out = model.run(seq, test::stack_frames(frames, begin, end),
                                  key ? StepMode::Keep : StepMode::Attend);
    for (int l = 0; l < 4; ++l) {
      const std::string key_name =
          "tokens.call" + std::to_string(call) + ".layer" + std::to_string(l);
      const auto a = test::compare(model.last_layers()[l], want.at(key_name));
      EXPECT_LE(a.relative(), kTol) << key_name << " (max abs err " << a.max_abs_err << ")";
    }
    pose.insert(pose.end(), out.pose_enc.f32(), out.pose_enc.f32() + out.pose_enc.numel());
    depth.insert(depth.end(), out.depth.f32(), out.depth.f32() + out.depth.numel());
    conf.insert(conf.end(), out.conf.f32(), out.conf.f32() + out.conf.numel());
    begin = end;
  }
  auto as_tensor = [](std::vector<float>& v, Shape s) {
    return Tensor::wrap(v.data(), s, DType::F32, nullptr);
  };
  const auto p = test::compare(as_tensor(pose, {16, 9}), want.at("pose_enc"));
  const auto d = test::compare(as_tensor(depth, {16, h, w}), want.at("depth"));
  const auto c = test::compare(as_tensor(conf, {16, h, w}), want.at("depth_conf"));
  EXPECT_LE(p.relative(), kTol) << "pose_enc";
  EXPECT_LE(d.relative(), kTol) << "depth";
  EXPECT_LE(c.relative(), kTol) << "depth_conf";
  std::printf("[ parity ] %s: pose_enc %.2e, depth %.2e, depth_conf %.2e relative\n", file.c_str(),
              p.relative(), d.relative(), c.relative());
}

TEST(StreamParity, TinyKeyframeInterval1MatchesReferencePerCall) {
  check_scenario("stream_kf1.safetensors", 1);
}

TEST(StreamParity, TinyKeyframeInterval3MatchesReferencePerCall) {
  check_scenario("stream_kf3.safetensors", 3);
}

// The same through the public API: Engine + Session deliver every frame's result.
TEST(StreamParity, SessionDeliversReferenceResults) {
  const auto want = read_safetensors(test::fixtures_dir() + "/tiny/stream_kf3.safetensors").tensors;
  auto engine = Engine::create({.model = "synthetic:1", .arch = "tiny"});
  auto session = engine->start({.scale_frames = 4, .window = 6, .keyframe_interval = 3});
  std::vector<FrameResult> results;
  auto collect = [&](const FrameResult& r) { results.push_back(r); };
  for (const Tensor& f : test::tiny_frames()) session->push(f, collect);
  session->finish(collect);
  ASSERT_EQ(results.size(), 16u);
  std::vector<float> pose;
  for (size_t i = 0; i < results.size(); ++i) {
    EXPECT_EQ(results[i].index, static_cast<int64_t>(i));
    EXPECT_EQ(results[i].keyframe, i < 4 || (i - 4) % 3 == 0) << i;
    pose.insert(pose.end(), results[i].pose_enc.begin(), results[i].pose_enc.end());
  }
  const auto p =
      test::compare(Tensor::wrap(pose.data(), {16, 9}, DType::F32, nullptr), want.at("pose_enc"));
  EXPECT_LE(p.relative(), kTol);
  const auto d = test::compare(Tensor::wrap(results[9].depth.data(), {56, 70}, DType::F32, nullptr),
                               want.at("depth")[9]);
  EXPECT_LE(d.relative(), kTol);
  EXPECT_EQ(session->cache_stats().stored_frames, 4 + 4);  // scale + keyframes 4, 7, 10, 13
}

// The fp8 KV cache (e4m3, per-head scales) against the reference's float32 run: held to the
// tolerances the fixtures give a bf16 engine (3e-2 pose_enc, 2e-2 depth), since it rounds the
// cache more coarsely than bf16 does.
TEST(StreamParity, TinyFp8KvCacheWithinBf16Tolerances) {
  const auto want = read_safetensors(test::fixtures_dir() + "/tiny/stream_kf1.safetensors").tensors;
  auto engine = Engine::create({.model = "synthetic:1", .arch = "tiny", .precision = "fp8"});
  EXPECT_EQ(engine->info().compute, "F32");
  EXPECT_EQ(engine->info().kv_cache, "F8_E4M3");
  auto session = engine->start({.scale_frames = 4, .window = 6, .keyframe_interval = 1});
  std::vector<float> pose, depth;
  auto collect = [&](const FrameResult& r) {
    pose.insert(pose.end(), r.pose_enc.begin(), r.pose_enc.end());
    depth.insert(depth.end(), r.depth.begin(), r.depth.end());
  };
  for (const Tensor& f : test::tiny_frames()) session->push(f, collect);
  session->finish(collect);
  ASSERT_EQ(pose.size(), 16u * 9);
  const auto p =
      test::compare(Tensor::wrap(pose.data(), {16, 9}, DType::F32, nullptr), want.at("pose_enc"));
  const auto d = test::compare(Tensor::wrap(depth.data(), {16, 56, 70}, DType::F32, nullptr),
                               want.at("depth"));
  std::printf("[ parity ] tiny fp8 KV cache kf1: pose_enc %.2e, depth %.2e relative\n",
              p.relative(), d.relative());
  EXPECT_LE(p.relative(), 3e-2);
  EXPECT_LE(d.relative(), 2e-2);
  EXPECT_GT(p.relative(), 0.0);  // the cache really was rounded
  // Half the bytes of the float32 run's cache per stored frame.
  auto f32_engine = Engine::create({.model = "synthetic:1", .arch = "tiny"});
  auto f32 = f32_engine->start({.scale_frames = 4, .window = 6, .keyframe_interval = 1});
  for (const Tensor& f : test::tiny_frames()) f32->push(f, [](const FrameResult&) {});
  f32->finish([](const FrameResult&) {});
  EXPECT_EQ(session->cache_stats().bytes * 4, f32->cache_stats().bytes);
}

}  // namespace
}  // namespace lingbot
