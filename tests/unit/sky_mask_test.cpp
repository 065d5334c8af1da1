// Sky masking: a small ONNX model of the reference skyseg.onnx's contract, run through OpenCV's
// DNN module, against numpy's computation of the same graph and contract
// (tests/python/sky_model.py); the mask folder; bad models.
#include "lingbot/sky_mask.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "lingbot/error.h"
#include "lingbot/image.h"
#include "sinks_test_util.h"
#include "sky_model_util.h"
#include "test_util.h"

namespace lingbot {
namespace {

namespace fs = std::filesystem;

class SkyMask : public test::TempDirTest {
 protected:
  // The model and its scene, or a skip.
  bool make_model() {
    if (!sky_segmentation_available()) return false;
    return test::make_sky_model(dir_.string());
  }
  Tensor scene() {
    const test::Npy n = test::read_npy(path("scene.npy"));
    EXPECT_TRUE(n.ok);
    EXPECT_EQ(n.shape, "(3, 640, 640)");
    Tensor t = Tensor::zeros({3, 640, 640});
    std::copy(n.values.begin(), n.values.end(), t.f32());
    return t;
  }
};

TEST_F(SkyMask, ModelAgreesWithNumpyOnTheReferenceContract) {
  if (!make_model()) GTEST_SKIP() << "no OpenCV DNN module or no python3 with onnx";
  SkyMasker masker({.model = path("sky.onnx")});
  const std::vector<uint8_t> keep = masker.non_sky(scene(), "scene.png");
  const test::Npy want = test::read_npy(path("expected.npy"));
  ASSERT_TRUE(want.ok);
  ASSERT_EQ(keep.size(), want.values.size());
  int64_t kept = 0, sky = 0, uncertain = 0, wrong = 0;
  for (size_t i = 0; i < keep.size(); ++i) {
    const float w = want.values[i];
    if (w == 0.5f) {
      ++uncertain;
      continue;
    }
    (w == 1.0f ? kept : sky) += 1;
    if (keep[i] != (w == 1.0f)) ++wrong;
  }
  EXPECT_EQ(wrong, 0);
  // The ground is kept and the sky dropped, up to the rows the 3x3 convolution mixes.
  EXPECT_GT(kept, 360 * 640 - 6 * 640);
  EXPECT_GT(sky, 280 * 640 - 6 * 640);
  EXPECT_LT(uncertain, 640);
  EXPECT_EQ(masker.counts().computed, 1);
}

TEST_F(SkyMask, StoredMasksAreWrittenAndReusedWithoutTheModel) {
  if (!make_model()) GTEST_SKIP() << "no OpenCV DNN module or no python3 with onnx";
  const Tensor frame = scene();
  std::vector<uint8_t> first;
  {
    SkyMasker masker(
        {.model = path("sky.onnx"), .dir = path("masks"), .visualization_dir = path("viz")});
    first = masker.non_sky(frame, "000007.jpg");
  }
  ASSERT_TRUE(fs::exists(path("masks/000007.png")));
  const ImageU8 stored = load_image(path("masks/000007.png"));
  ASSERT_EQ(stored.width, 640);
  for (size_t i = 0; i < first.size(); ++i) ASSERT_EQ(stored.rgb[3 * i], first[i] ? 255 : 0);
  const ImageU8 panel = load_image(path("viz/000007.png"));
  EXPECT_EQ(panel.width, 3 * 640);
  EXPECT_EQ(panel.height, 640);
  // The sky tinted: a sky pixel of the third panel is the frame's blended towards (255, 64, 64).
  const size_t sky = std::find(first.begin(), first.end(), 0) - first.begin();
  ASSERT_LT(sky, first.size());
  const size_t row = sky / 640, col = sky % 640;
  const uint8_t* src = &panel.rgb[(row * 3 * 640 + col) * 3];
  const uint8_t* tinted = &panel.rgb[(row * 3 * 640 + 2 * 640 + col) * 3];
  EXPECT_EQ(tinted[0], uint8_t(src[0] * 0.35f + 255 * 0.65f));
  EXPECT_EQ(tinted[2], uint8_t(src[2] * 0.35f + 64 * 0.65f));

  SkyMasker cached({.dir = path("masks")});
  EXPECT_EQ(cached.non_sky(frame, "000007.jpg"), first);
  EXPECT_EQ(cached.counts().reused, 1);
  EXPECT_EQ(cached.counts().computed, 0);
  // Of another size, and no model to compute it again: one error naming the file.
  Tensor small = Tensor::zeros({3, 14, 14});
  try {
    cached.non_sky(small, "000007.jpg");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("000007.png is 640x640, the frame 14x14"),
              std::string::npos)
        << e.what();
  }
}

TEST_F(SkyMask, ApplyMultipliesTheConfidenceByTheMask) {
  // A stored mask (no model needed): the left half kept.
  fs::create_directories(path("masks"));
  ImageU8 m{4, 2, std::vector<uint8_t>(4 * 2 * 3, 0)};
  for (int y = 0; y < 2; ++y)
    for (int x = 0; x < 2; ++x)
      for (int c = 0; c < 3; ++c) m.rgb[(y * 4 + x) * 3 + c] = 255;
  write_png(path("masks/a.png"), m);
  SkyMasker masker({.dir = path("masks")});
  FrameResult r;
  r.height = 2;
  r.width = 4;
  r.confidence = {1, 2, 3, 4, 5, 6, 7, 8};
  masker.apply(r, Tensor::zeros({3, 2, 4}), "a.png");
  EXPECT_EQ(r.confidence, (std::vector<float>{1, 2, 0, 0, 5, 6, 0, 0}));
}

TEST_F(SkyMask, BadModelsAreOneClearError) {
  auto message = [](const SkyMaskOptions& o) {
    try {
      SkyMasker m(o);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  const std::string missing = message({.model = path("none.onnx")});
  std::ofstream(path("junk.onnx")) << "this is not an ONNX model";
  const std::string junk = message({.model = path("junk.onnx")});
  for (const std::string& m : {missing, junk}) EXPECT_EQ(m.find('\n'), std::string::npos) << m;
  if (sky_segmentation_available()) {
    EXPECT_NE(missing.find("none.onnx: no such file"), std::string::npos) << missing;
    EXPECT_NE(junk.find("cannot read the sky segmentation model"), std::string::npos) << junk;
  } else {
    EXPECT_NE(missing.find("no OpenCV DNN module"), std::string::npos) << missing;
  }
  EXPECT_NE(message({}).find("needs a segmentation model or a folder"), std::string::npos);
}

}  // namespace
}  // namespace lingbot
