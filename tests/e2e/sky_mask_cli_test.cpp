// `run --mask-sky / --sky-mask-dir / --sky-mask-visualization-dir` and `--rotate-clockwise-90` end
// to end on the tiny fixture: a known masked region leaves the PLY and GLB exactly those points
// short, the predictions' confidence is zero exactly there, masks computed once are reused
// without the model, and bad models or missing masks are one line.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "lingbot/image.h"
#include "lingbot/sky_mask.h"
#include "sinks_test_util.h"
#include "sky_model_util.h"
#include "test_util.h"
#include "weights/safetensors.h"

namespace lingbot {
namespace {

namespace fs = std::filesystem;
const auto cli = test::run_cli;

class SkyMaskCli : public test::TempDirTest {
 protected:
  void SetUp() override {
    TempDirTest::SetUp();
    frames_ = test::fixtures_dir() + "/tiny/frames";
    if (!fs::is_directory(frames_)) GTEST_SKIP() << "no fixtures";
    base_ = "run --model synthetic:1 --arch tiny --input " + frames_ +
            " --preprocess none --scale-frames 4 --window 6 --first-k 6 --quiet";
  }
  std::string frames_, base_;
};

constexpr int kH = 56, kW = 70, kFrames = 6;

// Masked in frame f: the top 10 + f rows, and columns 30..39 of every row.
bool masked(int f, int y, int x) {
  return y < 10 + f || (x >= 30 && x < 40);
}

TEST_F(SkyMaskCli, KnownRegionLeavesExactlyThosePointsOutOfPlyAndGlb) {
  fs::create_directories(path("masks"));
  for (int f = 0; f < kFrames; ++f) {
    ImageU8 m{kW, kH, std::vector<uint8_t>(size_t(kW) * kH * 3)};
    for (int y = 0; y < kH; ++y)
      for (int x = 0; x < kW; ++x)
        for (int c = 0; c < 3; ++c) m.rgb[(size_t(y) * kW + x) * 3 + c] = masked(f, y, x) ? 0 : 255;
    char name[16];
    std::snprintf(name, sizeof name, "%03d.png", f);
    write_png(path("masks/") + name, m);
  }
  // Every pixel a point (the synthetic confidence is above 1 everywhere).
  const std::string exports = " --export ply,glb --point-stride 1 --conf-threshold 0.5";
  test::CliResult r = cli(base_ + exports + " --out " + path("plain"));
  ASSERT_EQ(r.code, 0) << r.output;
  r = cli(base_ + exports + " --sky-mask-dir " + path("masks") + " --out " + path("sky"));
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("sky masks: 0 computed, 6 reused"), std::string::npos) << r.output;

  // The predictions: confidence 0 exactly in the region, unchanged elsewhere.
  const auto plain = read_safetensors(path("plain/predictions.safetensors")).tensors;
  const auto sky = read_safetensors(path("sky/predictions.safetensors")).tensors;
  const float* c0 = plain.at("depth_conf").f32();
  const float* c1 = sky.at("depth_conf").f32();
  for (int f = 0; f < kFrames; ++f)
    for (int y = 0; y < kH; ++y)
      for (int x = 0; x < kW; ++x) {
        const size_t i = (size_t(f) * kH + y) * kW + x;
        ASSERT_GT(c0[i], 0.5f);
        ASSERT_EQ(c1[i], masked(f, y, x) ? 0.0f : c0[i]) << f << " " << y << " " << x;
      }

  // The PLY: the plain run's points, frame by frame and row by row, less the masked pixels.
  const auto all = test::read_ply(path("plain/points.ply"));
  const auto kept = test::read_ply(path("sky/points.ply"));
  ASSERT_TRUE(all.ok && kept.ok);
  ASSERT_EQ(all.count, int64_t(kFrames) * kH * kW);
  std::vector<test::PlyVertex> want;
  for (int64_t i = 0; i < all.count; ++i) {
    const int f = int(i / (kH * kW)), y = int(i / kW % kH), x = int(i % kW);
    if (!masked(f, y, x)) want.push_back(all.vertices[size_t(i)]);
  }
  ASSERT_EQ(kept.vertices.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    ASSERT_EQ(kept.vertices[i].x, want[i].x) << i;
    ASSERT_EQ(kept.vertices[i].z, want[i].z) << i;
    ASSERT_EQ(kept.vertices[i].r, want[i].r) << i;
  }

  // The GLB's point mesh: the same points.
  const test::Glb glb = test::read_glb(path("sky/points.glb"));
  ASSERT_TRUE(glb.ok()) << glb.error;
  int positions = -1;
  for (const auto& m : glb.json["meshes"])
    for (const auto& p : m["primitives"])
      if (p.value("mode", 4) == 0) positions = p["attributes"]["POSITION"];
  ASSERT_GE(positions, 0);
  const std::vector<float> xyz = glb.floats(positions);
  ASSERT_EQ(xyz.size(), 3 * want.size());
  for (size_t i = 0; i < want.size(); ++i) ASSERT_EQ(xyz[3 * i + 2], want[i].z) << i;
}

TEST_F(SkyMaskCli, ModelMasksAreStoredThenReusedWithoutTheModel) {
  if (!sky_segmentation_available()) GTEST_SKIP() << "no OpenCV DNN module";
  if (!test::make_sky_model(path("model"))) GTEST_SKIP() << "no python3 with onnx";
  test::CliResult r =
      cli(base_ + " --mask-sky " + path("model/sky.onnx") + " --sky-mask-dir " + path("masks") +
          " --sky-mask-visualization-dir " + path("viz") + " --out " + path("first"));
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("sky masks: 6 computed, 0 reused"), std::string::npos) << r.output;
  const auto first = read_safetensors(path("first/predictions.safetensors")).tensors;
  const float* conf = first.at("depth_conf").f32();
  int64_t kept = 0;
  for (int f = 0; f < kFrames; ++f) {
    char name[16];
    std::snprintf(name, sizeof name, "%03d.png", f);
    const ImageU8 m = load_image(path("masks/") + name);
    ASSERT_EQ(m.width, kW);
    ASSERT_EQ(m.height, kH);
    EXPECT_EQ(load_image(path("viz/") + name).width, 3 * kW);
    for (size_t i = 0; i < size_t(kW) * kH; ++i) {
      ASSERT_TRUE(m.rgb[3 * i] == 0 || m.rgb[3 * i] == 255);
      ASSERT_EQ(conf[size_t(f) * kW * kH + i] == 0.0f, m.rgb[3 * i] == 0) << f << " " << i;
      kept += m.rgb[3 * i] != 0;
    }
  }
  EXPECT_GT(kept, 0);  // the pixels at each frame's lowest score at least
  EXPECT_LT(kept, int64_t(kFrames) * kW * kH);

  // Again with the folder alone: nothing computed, the same confidence.
  r = cli(base_ + " --sky-mask-dir " + path("masks") + " --out " + path("second"));
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("sky masks: 0 computed, 6 reused"), std::string::npos) << r.output;
  const auto second = read_safetensors(path("second/predictions.safetensors")).tensors;
  const Tensor& a = first.at("depth_conf");
  const Tensor& b = second.at("depth_conf");
  ASSERT_EQ(a.numel(), b.numel());
  EXPECT_EQ(std::memcmp(a.f32(), b.f32(), a.nbytes()), 0);
}

TEST_F(SkyMaskCli, BadModelOrMissingMaskIsOneLine) {
  const std::string no_dnn = "no OpenCV DNN module";
  const bool dnn = sky_segmentation_available();
  test::expect_clean_cli_failure(base_ + " --mask-sky " + path("none.onnx") + " --out " + path("a"),
                                 dnn ? "none.onnx: no such file" : no_dnn);
  std::ofstream(path("junk.onnx")) << "not a model";
  test::expect_clean_cli_failure(base_ + " --mask-sky " + path("junk.onnx") + " --out " + path("b"),
                                 dnn ? "cannot read the sky segmentation model" : no_dnn);
  fs::create_directories(path("empty"));
  test::expect_clean_cli_failure(base_ + " --sky-mask-dir " + path("empty") + " --out " + path("c"),
                                 "no sky mask for frame 000.png");
  test::expect_clean_cli_failure(
      base_ + " --sky-mask-visualization-dir " + path("v") + " --out " + path("d"),
      "needs --mask-sky or --sky-mask-dir");
}

TEST_F(SkyMaskCli, RotateClockwise90TurnsEveryFrameBeforePreprocessing) {
  std::string base = base_;
  base.replace(base.find("--first-k 6"), 11, "--first-k 2");
  const test::CliResult r =
      cli(base + " --rotate-clockwise-90 --export images --out " + path("out"));
  ASSERT_EQ(r.code, 0) << r.output;
  for (const char* name : {"000.png", "001.png"}) {
    const ImageU8 in = load_image(frames_ + "/" + name);
    const ImageU8 out = load_image(path("out/images/") + name);
    ASSERT_EQ(in.width, kW);
    ASSERT_EQ(in.height, kH);
    ASSERT_EQ(out.width, kH);
    ASSERT_EQ(out.height, kW);
    // A quarter turn clockwise: the output's row y is the input's column y, read bottom-up.
    for (int y = 0; y < out.height; ++y)
      for (int x = 0; x < out.width; ++x)
        for (int c = 0; c < 3; ++c)
          ASSERT_EQ(out.rgb[(size_t(y) * out.width + x) * 3 + c],
                    in.rgb[(size_t(in.height - 1 - x) * in.width + y) * 3 + c])
              << name << " " << x << " " << y;
  }
  const auto p = read_safetensors(path("out/predictions.safetensors")).tensors;
  EXPECT_EQ(p.at("depth").dim(1), kW);
  EXPECT_EQ(p.at("depth").dim(2), kH);
}

}  // namespace
}  // namespace lingbot
