// DPT head against the reference: every streaming call's aggregator tokens through the head with
// synthetic weights, compared with the fixture's depth and confidence rows of those frames.
#include "model/depth_head.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>

#include "backend/ops.h"
#include "heads_fixture.h"
#include "lingbot/error.h"
#include "model/weight_loader.h"

namespace lingbot {
namespace {

constexpr double kTolerance = 1e-4;  // fixtures/README.md, float32 on tiny/

// batch: frames per pass through the head (the first call's scale frames come as a batch of 3
// and a smaller one: a plan that grows, then views for fewer frames).
void check_stream(const std::string& name, int64_t batch = 1) {
  test::TinyStream fx(name);
  auto be = make_cpu_backend();
  WeightLoader loader(fx.seed(), *be);
  DepthHead head;
  head.load(loader, fx.depth_config());

  const Tensor& want_depth = fx.get("depth");
  const Tensor& want_conf = fx.get("depth_conf");
  Tensor got_depth = Tensor::zeros(want_depth.shape());
  Tensor got_conf = Tensor::zeros(want_conf.shape());
  for (int call = 0; call < fx.calls(); ++call) {
    std::array<Tensor, 4> layers;
    for (int l = 0; l < 4; ++l) layers[l] = be->upload(fx.tokens(call, l), DType::F32);
    const DepthOutput out = head.run(*be, layers, fx.H, fx.W, batch);
    const int first = fx.first_frame(call), n = fx.frames_in(call);
    ASSERT_EQ(out.depth.dim(0), n);
    const test::Agreement d = test::compare(out.depth, want_depth.slice(first, first + n));
    const test::Agreement c = test::compare(out.conf, want_conf.slice(first, first + n));
    EXPECT_LE(d.relative(), kTolerance) << name << " call " << call << " depth";
    EXPECT_LE(c.relative(), kTolerance) << name << " call " << call << " conf";
    std::memcpy(got_depth[first].raw(), out.depth.raw(), out.depth.nbytes());
    std::memcpy(got_conf[first].raw(), out.conf.raw(), out.conf.nbytes());
  }
  const test::Agreement d = test::compare(got_depth, want_depth);
  const test::Agreement c = test::compare(got_conf, want_conf);
  EXPECT_LE(d.relative(), kTolerance);
  EXPECT_LE(c.relative(), kTolerance);
  std::printf("[ parity   ] %s batch %lld: depth %.3g (max abs %.3g), conf %.3g (max abs %.3g)\n",
              name.c_str(), static_cast<long long>(batch), d.relative(), d.max_abs_err,
              c.relative(), c.max_abs_err);
}

TEST(DepthHeadParity, TinyKeyframeInterval1) {
  check_stream("stream_kf1");
}

// Frames of several sequences go through the head together.
TEST(DepthHeadParity, TinyFramesInBatches) {
  check_stream("stream_kf1", 3);
}

// The head is stateless; the kf3 stream only brings different tokens.
TEST(DepthHeadParity, TinyKeyframeInterval3) {
  check_stream("stream_kf3");
}

// Layers of the wrong shape are one clear error.
TEST(DepthHead, LayersOfTheWrongShapeAreOneLine) {
  test::TinyStream fx("stream_kf1");
  auto be = make_cpu_backend();
  WeightLoader loader(fx.seed(), *be);
  DepthHead head;
  head.load(loader, fx.depth_config());
  std::array<Tensor, 4> layers;
  for (int l = 0; l < 4; ++l) layers[l] = be->upload(fx.tokens(0, l), DType::F32);
  const int64_t s = layers[0].dim(0), t = layers[0].dim(1), c = layers[0].dim(2);
  layers[2] = be->alloc({s, t, c - 1}, DType::F32);
  try {
    head.run(*be, layers, fx.H, fx.W);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("depth head: expected 4 layers"), std::string::npos)
        << e.what();
    EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << e.what();
  }
}

TEST(DepthHead, UvEmbeddingGrid) {
  // 27×36 at aspect 4/3: corner (-0.77778, -0.57778), next x -0.73333, next y
  // -0.53333. Channel 0 is sin(x·1), channel 2Q is sin(y·1).
  const int64_t h = 27, w = 36, ch = 8, q = ch / 4;
  const Tensor e = uv_pos_embed(h, w, ch, 4.0 / 3.0, 1.0f);
  const float* p = e.f32();
  const int64_t plane = h * w;
  EXPECT_NEAR(std::asin(p[0]), -0.77778, 1e-5);
  EXPECT_NEAR(std::asin(p[1]), -0.73333, 1e-5);
  EXPECT_NEAR(std::asin(p[2 * q * plane]), -0.57778, 1e-5);
  EXPECT_NEAR(std::asin(p[2 * q * plane + w]), -0.53333, 1e-5);
  // The grid is symmetric: the last pixel mirrors the first.
  EXPECT_EQ(p[plane - 1], -p[0]);
  EXPECT_EQ(p[2 * q * plane + plane - 1], -p[2 * q * plane]);
  // Cosine blocks, frequency 1.
  EXPECT_NEAR(p[q * plane], std::cos(std::asin(p[0])), 1e-6);
}

}  // namespace
}  // namespace lingbot
