// Loop detection without images: the descriptor index's top-k, floor and temporal exclusion,
// and the place descriptor the model computes (checked against a pooling written here from its
// definition, over the trunk tokens the same step produced).
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <vector>

#include "backend/ops.h"
#include "lingbot/error.h"
#include "lingbot/loop.h"
#include "model/model.h"
#include "model/place_descriptor.h"
#include "model/weight_loader.h"
#include "stream/sequence.h"
#include "test_util.h"
#include "tiny_frames.h"

namespace lingbot {
namespace {

TEST(DescriptorIndex, TopKBestFirstAmongOldEnoughFramesAboveTheFloor) {
  DescriptorIndex index;
  // Frame f points at angle 0.3 f in the plane: cosine to angle a is cos(a - 0.3 f).
  for (int f = 0; f < 10; ++f)
    index.add(f * 2,
              {static_cast<float>(std::cos(0.3 * f)), static_cast<float>(std::sin(0.3 * f))});
  EXPECT_EQ(index.size(), 10);
  EXPECT_EQ(index.bytes(), 10u * (2 * 4 + 8));
  const std::vector<float> q = {static_cast<float>(std::cos(1.2)),
                                static_cast<float>(std::sin(1.2))};
  // All frames eligible: the nearest angle is f = 4 (frame 8), then f = 3 and 5 (frames 6 and
  // 10, equally near up to rounding).
  auto hits = index.query(q, 100, 3, -1.f);
  ASSERT_EQ(hits.size(), 3u);
  EXPECT_EQ(hits[0].frame, 8);
  EXPECT_NEAR(hits[0].similarity, 1.0, 1e-6);
  EXPECT_EQ(hits[1].frame + hits[2].frame, 16);
  EXPECT_NE(hits[1].frame, hits[2].frame);
  EXPECT_NEAR(hits[1].similarity, std::cos(0.3), 1e-6);
  EXPECT_NEAR(hits[2].similarity, std::cos(0.3), 1e-6);
  EXPECT_GE(hits[1].similarity, hits[2].similarity);
  // The temporal exclusion: only frames <= 7 (f <= 3).
  hits = index.query(q, 7, 3, -1.f);
  ASSERT_EQ(hits.size(), 3u);
  EXPECT_EQ(hits[0].frame, 6);
  EXPECT_EQ(hits[1].frame, 4);
  EXPECT_EQ(hits[2].frame, 2);
  // The floor: cos(0.6) = 0.825 keeps f = 2..6 only; k larger than what passes.
  hits = index.query(q, 100, 10, 0.8f);
  ASSERT_EQ(hits.size(), 5u);
  for (const auto& h : hits) EXPECT_GE(h.similarity, 0.8f);
  EXPECT_TRUE(index.query(q, -1, 3, -1.f).empty());  // nothing old enough
  EXPECT_TRUE(index.query(q, 100, 0, -1.f).empty());
}

TEST(DescriptorIndex, RefusesMixedLengthsAndFramesOutOfOrder) {
  DescriptorIndex index;
  EXPECT_THROW(index.add(0, {}), Error);
  index.add(3, {1.f, 0.f});
  EXPECT_THROW(index.add(4, {1.f, 0.f, 0.f}), Error);
  EXPECT_THROW(index.add(3, {0.f, 1.f}), Error);
  EXPECT_THROW(index.query({1.f}, 10, 1, 0.f), Error);
}

TEST(PlaceDescriptor, FinishNormalisesEachHalfToOneOverRootTwo) {
  // Pooled [C = 3, 2]: patch mean (3, 0, 4), register mean (0, -2, 0).
  const float pooled[6] = {3, 0, 0, -2, 4, 0};
  float out[6];
  PlaceDescriptor::finish(pooled, 3, out);
  const double r = 1 / std::sqrt(2.0);
  EXPECT_NEAR(out[0], 0.6 * r, 1e-7);
  EXPECT_NEAR(out[1], 0.0, 1e-7);
  EXPECT_NEAR(out[2], 0.8 * r, 1e-7);
  EXPECT_NEAR(out[3], 0.0, 1e-7);
  EXPECT_NEAR(out[4], -r, 1e-7);
  EXPECT_NEAR(out[5], 0.0, 1e-7);
}

// The descriptor of each frame of a step equals the means of its trunk tokens computed here
// (patch rows, register rows; normalised), and asking for it changes no other output.
TEST(PlaceDescriptor, ModelStepPoolsTheTrunkTokensAndChangesNothingElse) {
  const auto frames = test::tiny_frames();
  ASSERT_GE(frames.size(), 5u) << "tiny fixture frames missing";
  auto backend = make_cpu_backend();
  WeightLoader weights(1, *backend);
  const ModelConfig cfg = ModelConfig::preset("tiny");
  Model model(*backend, weights, cfg);
  const int64_t h = frames[0].dim(1), w = frames[0].dim(2), c = cfg.dim, r = cfg.registers;
  StreamOptions plain{.scale_frames = 4, .window = 6};
  StreamOptions with = plain;
  with.descriptors = true;
  SequenceState a(model, sequence_config(cfg, h, w, plain));
  SequenceState b(model, sequence_config(cfg, h, w, with));
  for (auto [begin, end] : {std::pair<size_t, size_t>{0, 4}, {4, 5}}) {
    const Tensor batch = test::stack_frames(frames, begin, end);
    const Model::Output oa = model.run(a, batch, StepMode::Keep);
    const std::vector<float> pose(oa.pose_enc.f32(), oa.pose_enc.f32() + oa.pose_enc.numel());
    const std::vector<float> depth(oa.depth.f32(), oa.depth.f32() + oa.depth.numel());
    EXPECT_FALSE(oa.descriptor.defined());
    const Model::Output ob = model.run(b, batch, StepMode::Keep);
    const Tensor trunk = backend->download(model.last_trunk_tokens());
    // Bit for bit: the descriptor's ops only read what the step computed.
    EXPECT_EQ(pose, std::vector<float>(ob.pose_enc.f32(), ob.pose_enc.f32() + ob.pose_enc.numel()));
    EXPECT_EQ(depth, std::vector<float>(ob.depth.f32(), ob.depth.f32() + ob.depth.numel()));
    const int64_t s = static_cast<int64_t>(end - begin), n = trunk.dim(1);
    ASSERT_EQ(ob.descriptor.shape(), (Shape{s, 2 * c}));
    for (int64_t f = 0; f < s; ++f) {
      std::vector<double> patch(c, 0), reg(c, 0);
      for (int64_t t = 1; t < n; ++t)
        for (int64_t k = 0; k < c; ++k) {
          const double v = trunk.f32()[(f * n + t) * c + k];
          (t <= r ? reg : patch)[k] += v;
        }
      double np = 0, nr = 0;
      for (int64_t k = 0; k < c; ++k) {
        np += patch[k] * patch[k];
        nr += reg[k] * reg[k];
      }
      double norm = 0;
      for (int64_t k = 0; k < c; ++k) {
        const double want_p = patch[k] / std::sqrt(np) / std::sqrt(2.0);
        const double want_r = reg[k] / std::sqrt(nr) / std::sqrt(2.0);
        const float got_p = ob.descriptor.f32()[f * 2 * c + k];
        const float got_r = ob.descriptor.f32()[f * 2 * c + c + k];
        EXPECT_NEAR(got_p, want_p, 1e-5) << "frame " << f << " channel " << k;
        EXPECT_NEAR(got_r, want_r, 1e-5) << "frame " << f << " channel " << k;
        norm += double(got_p) * got_p + double(got_r) * got_r;
      }
      EXPECT_NEAR(norm, 1.0, 1e-5);
    }
  }
}

}  // namespace
}  // namespace lingbot
