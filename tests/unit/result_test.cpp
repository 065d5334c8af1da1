// A run read back: predictions.safetensors and images/ as `run` writes them give back the
// results that went in, and the points are the PLY export's.
#include "lingbot/result.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "lingbot/error.h"
#include "lingbot/image.h"
#include "sinks_test_util.h"
#include "test_util.h"
#include "weights/safetensors.h"

namespace lingbot {
namespace {

using Result = test::TempDirTest;

TEST_F(Result, ReadsBackWhatTheWriterWrote) {
  PredictionsWriter w(path("predictions.safetensors"));
  std::vector<FrameResult> in;
  for (int i = 0; i < 3; ++i) {
    in.push_back(test::make_frame(i));
    in.back().scale_frame = i == 0;
    in.back().keyframe = i != 2;
    w.add(in.back());
  }
  w.finish();
  const RunResult run = read_result(path(""));
  ASSERT_EQ(run.frames.size(), in.size());
  EXPECT_FALSE(run.windowed);
  for (size_t i = 0; i < in.size(); ++i) {
    const FrameResult& a = in[i];
    EXPECT_TRUE(run.frames[i].depth.empty());  // the maps stay in the mapped file
    const FrameResult b = result_frame(run, int64_t(i));
    EXPECT_EQ(b.index, int64_t(i));
    EXPECT_EQ(b.scale_frame, a.scale_frame);
    EXPECT_EQ(b.keyframe, a.keyframe);
    EXPECT_EQ(b.pose_enc, a.pose_enc);
    EXPECT_EQ(b.c2w, a.c2w);
    EXPECT_EQ(b.w2c, a.w2c);
    EXPECT_EQ(b.intrinsics, a.intrinsics);
    EXPECT_EQ(b.depth, a.depth);
    EXPECT_EQ(b.confidence, a.confidence);
  }
  // The file itself may be named too.
  EXPECT_EQ(read_result(path("predictions.safetensors")).frames.size(), in.size());
  // No images/: no colours.
  EXPECT_FALSE(read_result_image(run, 1).has_value());
}

TEST_F(Result, ImagesAndPointsMatchThePlyExport) {
  PredictionsWriter w(path("predictions.safetensors"));
  const FrameResult f = test::make_frame(0);
  w.add(f);
  w.finish();
  const Tensor rgb = test::make_rgb_u8(3);
  auto images = make_image_sink(path("images"));
  images->add(f, &rgb);
  images->finish();

  const RunResult run = read_result(path(""));
  const std::optional<Tensor> back = read_result_image(run, 0);
  ASSERT_TRUE(back.has_value());
  ASSERT_EQ(back->shape(), (Shape{3, test::kH, test::kW}));
  const PointOptions o{.conf_threshold = 1.2f, .stride = 2};
  const FramePoints p = frame_points(result_frame(run, 0), &*back, o);
  const auto want = test::expected_points(f, o.conf_threshold, o.stride);
  ASSERT_EQ(p.size(), int64_t(want.size()));
  ASSERT_GT(p.size(), 0);
  const int64_t plane = int64_t(test::kH) * test::kW;
  for (int64_t i = 0; i < p.size(); ++i) {
    const auto& e = want[size_t(i)];
    EXPECT_NEAR(p.xyz[3 * i], e.x, 1e-5 * (1 + std::abs(e.x)));
    EXPECT_NEAR(p.xyz[3 * i + 1], e.y, 1e-5 * (1 + std::abs(e.y)));
    EXPECT_NEAR(p.xyz[3 * i + 2], e.z, 1e-5 * (1 + std::abs(e.z)));
    EXPECT_EQ(p.confidence[size_t(i)], e.conf);
    for (int k = 0; k < 3; ++k)
      EXPECT_EQ(p.rgb[3 * i + k], rgb.data<uint8_t>()[k * plane + e.v * test::kW + e.u]);
  }
}

TEST_F(Result, BadFilesGiveOneLine) {
  try {
    read_result(path("missing"));
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::NotFound);
    EXPECT_NE(std::string(e.what()).find("predictions"), std::string::npos);
  }
  std::ofstream(path("predictions.safetensors")) << "not a safetensors file";
  EXPECT_THROW(read_result(path("")), Error);
  // A safetensors file without the predictions' tensors.
  PredictionsWriter w(path("whole.safetensors"));
  w.add(test::make_frame(0));
  w.finish();
  TensorMap t = read_safetensors(path("whole.safetensors")).tensors;
  t.erase("c2w");
  write_safetensors(path("predictions.safetensors"), t);
  try {
    read_result(path(""));
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("c2w"), std::string::npos) << e.what();
  }
}

TEST(CameraColour, RampsFromFirstToLast) {
  const auto a = camera_colour(0, 10), m = camera_colour(5, 10), b = camera_colour(9, 10);
  EXPECT_NE(a, b);
  EXPECT_NE(a, m);
  EXPECT_EQ(camera_colour(0, 1), a);
  EXPECT_EQ(camera_colour(20, 10), b);  // clamped
  // Brightness grows along the ramp, so order reads on any background.
  auto luma = [](std::array<uint8_t, 3> c) { return 0.3 * c[0] + 0.59 * c[1] + 0.11 * c[2]; };
  EXPECT_LT(luma(a), luma(m));
  EXPECT_LT(luma(m), luma(b));
}

}  // namespace
}  // namespace lingbot
