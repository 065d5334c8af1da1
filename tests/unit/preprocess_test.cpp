#include "io/preprocess.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "io/image.h"
#include "lingbot/error.h"
#include "test_util.h"
#include "weights/safetensors.h"

namespace lingbot {
namespace {

namespace fs = std::filesystem;

std::string preproc_dir() {
  return test::fixtures_dir() + "/preproc";
}

// Every fixture image in both modes must equal the reference's bytes exactly.
TEST(Preprocess, MatchesReferenceBitExactly) {
  const SafetensorsFile expected = read_safetensors(preproc_dir() + "/expected_u8.safetensors");
  int checked = 0;
  std::string report;
  for (const char* mode_name : {"crop", "pad"}) {
    const PreprocessMode mode =
        std::string(mode_name) == "crop" ? PreprocessMode::Crop : PreprocessMode::Pad;
    for (const auto& entry : fs::directory_iterator(preproc_dir())) {
      const std::string file = entry.path().filename().string();
      if (entry.path().extension() == ".safetensors") continue;
      const std::string key = std::string(mode_name) + "/" + file;
      auto it = expected.tensors.find(key);
      ASSERT_NE(it, expected.tensors.end()) << "no expected output for " << key;
      const Tensor& want = it->second;
      const Tensor got = preprocess(load_image(entry.path().string()), mode);
      ++checked;
      if (got.shape() != want.shape()) {
        report += key + ": shape " + shape_str(got.shape()) + ", expected " +
                  shape_str(want.shape()) + "\n";
        continue;
      }
      int max_diff = 0;
      int64_t differing = 0;
      for (int64_t i = 0; i < got.numel(); ++i) {
        const int d = std::abs(int(got.data<uint8_t>()[i]) - int(want.data<uint8_t>()[i]));
        max_diff = std::max(max_diff, d);
        differing += d != 0;
      }
      if (max_diff != 0)
        report += key + ": max abs difference " + std::to_string(max_diff) + " in " +
                  std::to_string(differing) + " of " + std::to_string(got.numel()) + " values\n";
    }
  }
  EXPECT_EQ(checked, 20);
  EXPECT_TRUE(report.empty()) << report;
}

// The command writes the same frames as PNG files: the fixture folder in pad mode.
TEST(Preprocess, CommandWritesTheReferenceFrames) {
  const fs::path out =
      fs::temp_directory_path() / ("lingbot_preprocess_cli_" + std::to_string(::getpid()));
  fs::remove_all(out);
  const std::string cmd = std::string(LINGBOT_CLI) + " preprocess --input " + preproc_dir() +
                          " --mode pad --out " + out.string() + " > /dev/null";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  const SafetensorsFile expected = read_safetensors(preproc_dir() + "/expected_u8.safetensors");
  int checked = 0;
  for (const auto& [key, want] : expected.tensors) {
    if (key.rfind("pad/", 0) != 0) continue;
    const ImageU8 img = load_image((out / fs::path(key.substr(4)).stem()).string() + ".png");
    ASSERT_EQ(img.width, want.dim(2)) << key;
    ASSERT_EQ(img.height, want.dim(1)) << key;
    const int64_t hw = int64_t(img.width) * img.height;
    int64_t differing = 0;
    for (int64_t i = 0; i < 3 * hw; ++i)
      differing += img.rgb[(i % hw) * 3 + i / hw] != want.data<uint8_t>()[i];
    EXPECT_EQ(differing, 0) << key;
    ++checked;
  }
  EXPECT_EQ(checked, 10);
  // A bad size is refused with a message, not a crash.
  const std::string bad = std::string(LINGBOT_CLI) + " preprocess --input " + preproc_dir() +
                          " --size 500 --out " + out.string() + " 2> /dev/null";
  EXPECT_NE(std::system(bad.c_str()), 0);
  fs::remove_all(out);
}

// 4 -> 2 pixels: scale 2, so the kernel is stretched to support 4 (antialiasing) and each
// output reads all four inputs. Output 0 has centre 1.0; its taps sit at (m - 0.5) / 2 =
// -0.25, 0.25, 0.75, 1.25, where K = 111/128, 111/128, 29/128, -9/128 (sum 242/128), so the
// normalised weights are 111/242, 111/242, 29/242, -9/242. Output 1 is the mirror image.
TEST(Preprocess, ResizeWeightsForASmallDownscale) {
  const ResampleWeights w = bicubic_weights(4, 2);
  EXPECT_EQ(w.ksize, 9);  // 2 * ceil(4) + 1
  ASSERT_EQ(w.first.size(), 2u);
  EXPECT_EQ(w.first[0], 0);
  EXPECT_EQ(w.count[0], 4);  // (int)(1 - 4 + .5) = -2 -> 0; (int)(1 + 4 + .5) = 5 -> 4
  EXPECT_EQ(w.first[1], 0);
  EXPECT_EQ(w.count[1], 4);
  const double s = 1 << 22;
  const int32_t want0[4] = {int32_t(111.0 / 242 * s + 0.5), int32_t(111.0 / 242 * s + 0.5),
                            int32_t(29.0 / 242 * s + 0.5), int32_t(-9.0 / 242 * s - 0.5)};
  EXPECT_EQ(want0[0], 1923834);  // 111 / 242 * 2^22 = 1923833.65
  for (int m = 0; m < 4; ++m) EXPECT_EQ(w.k[m], want0[m]) << m;
  for (int m = 0; m < 4; ++m) EXPECT_EQ(w.k[w.ksize + m], want0[3 - m]) << m;
  for (int m = 4; m < 9; ++m) EXPECT_EQ(w.k[m], 0) << m;

  // Row 0, 0, 255, 255:   out0 = 255 * (29 - 9) / 242 = 21.07 -> 21
  //                       out1 = 255 * 222 / 242 = 233.9 -> 234
  // Row 0, 100, 200, 100: out0 = (11100 + 5800 - 900) / 242 = 66.1 -> 66
  //                       out1 = (2900 + 22200 + 11100) / 242 = 149.6 -> 150
  ImageU8 img;
  img.width = 4;
  img.height = 2;
  const uint8_t rows[2][4] = {{0, 0, 255, 255}, {0, 100, 200, 100}};
  for (int y = 0; y < 2; ++y)
    for (int x = 0; x < 4; ++x)
      for (int c = 0; c < 3; ++c) img.rgb.push_back(rows[y][x]);
  const ImageU8 r = resize_bicubic(img, 2, 2);
  ASSERT_EQ(r.width, 2);
  ASSERT_EQ(r.height, 2);
  const uint8_t want[2][2] = {{21, 234}, {66, 150}};
  for (int y = 0; y < 2; ++y)
    for (int x = 0; x < 2; ++x)
      for (int c = 0; c < 3; ++c) EXPECT_EQ(r.rgb[(y * 2 + x) * 3 + c], want[y][x]) << y << x;

  // The same data as a column goes through the vertical pass and must agree.
  ImageU8 col;
  col.width = 1;
  col.height = 4;
  for (int y = 0; y < 4; ++y)
    for (int c = 0; c < 3; ++c) col.rgb.push_back(rows[1][y]);
  const ImageU8 rc = resize_bicubic(col, 1, 2);
  EXPECT_EQ(rc.rgb[0], 66);
  EXPECT_EQ(rc.rgb[3], 150);
}

// Upscaling keeps the plain 4-tap cubic: 2 -> 4 has scale 0.5 and support 2. Output 1 has
// centre 0.75 and reads inputs 0 and 1 (the rest of its support is outside the image), at
// distances 0.25 and 0.75: K = 111/128 and 29/128, normalised to 111/140 and 29/140.
TEST(Preprocess, ResizeWeightsForASmallUpscale) {
  const ResampleWeights w = bicubic_weights(2, 4);
  EXPECT_EQ(w.ksize, 5);
  EXPECT_EQ(w.first[1], 0);
  EXPECT_EQ(w.count[1], 2);
  const double s = 1 << 22;
  EXPECT_EQ(w.k[w.ksize + 0], int32_t(111.0 / 140 * s + 0.5));
  EXPECT_EQ(w.k[w.ksize + 1], int32_t(29.0 / 140 * s + 0.5));
}

TEST(Preprocess, TargetSizeFollowsTheSpecTable) {
  struct Case {
    int w, h, rw, rh;
  };
  // The crop mode at width 518, before the centre crop.
  for (const Case& c :
       {Case{640, 480, 518, 392}, Case{4032, 3024, 518, 392}, Case{1920, 1080, 518, 294},
        Case{1280, 720, 518, 294}, Case{6000, 4000, 518, 350}, Case{480, 640, 518, 686},
        Case{1080, 1440, 518, 686}}) {
    const Size2 s = preprocess_resize_size(c.w, c.h, PreprocessMode::Crop);
    EXPECT_EQ(s.width, c.rw) << c.w << "x" << c.h;
    EXPECT_EQ(s.height, c.rh) << c.w << "x" << c.h;
  }
  // Pad mode scales the longer side to the target.
  const Size2 p = preprocess_resize_size(480, 640, PreprocessMode::Pad);
  EXPECT_EQ(p.width, 392);
  EXPECT_EQ(p.height, 518);
  // Halfway cases round to even, as Python's round: 518 * 259 / 518 / 14 = 18.5 -> 18, and
  // 518 * 287 / 518 / 14 = 20.5 -> 20; 273 -> 19.5 -> 20.
  EXPECT_EQ(preprocess_resize_size(518, 259, PreprocessMode::Crop).height, 18 * 14);
  EXPECT_EQ(preprocess_resize_size(518, 287, PreprocessMode::Crop).height, 20 * 14);
  EXPECT_EQ(preprocess_resize_size(518, 273, PreprocessMode::Crop).height, 20 * 14);
  // A panorama so wide that the height rounds to 0 cannot be resized (Pillow refuses too).
  EXPECT_THROW(preprocess_resize_size(10000, 10, PreprocessMode::Crop), Error);
}

TEST(Preprocess, CropAndPadShapes) {
  ImageU8 img;
  img.width = 100;
  img.height = 200;
  img.rgb.assign(100 * 200 * 3, 7);
  const Tensor crop = preprocess(img, PreprocessMode::Crop);
  EXPECT_EQ(crop.shape(), (Shape{3, 518, 518}));  // 1036 tall, centre-cropped
  const Tensor pad = preprocess(img, PreprocessMode::Pad);
  EXPECT_EQ(pad.shape(), (Shape{3, 518, 518}));
  // Resized to 252 x 518: 133 white columns on the left, 133 on the right.
  const uint8_t* p = pad.data<uint8_t>();
  EXPECT_EQ(p[100 * 518 + 132], 255);
  EXPECT_EQ(p[100 * 518 + 133], 7);
  EXPECT_EQ(p[100 * 518 + 133 + 251], 7);
  EXPECT_EQ(p[100 * 518 + 133 + 252], 255);
}

TEST(Preprocess, NoneModeNeedsPatchMultiples) {
  ImageU8 img;
  img.width = 28;
  img.height = 42;
  img.rgb.assign(28 * 42 * 3, 0);
  for (size_t i = 0; i < img.rgb.size(); ++i) img.rgb[i] = uint8_t(i * 7);
  const Tensor t = preprocess(img, PreprocessMode::None);
  ASSERT_EQ(t.shape(), (Shape{3, 42, 28}));
  EXPECT_EQ(t.data<uint8_t>()[1 * 42 * 28 + 5 * 28 + 3], img.rgb[(5 * 28 + 3) * 3 + 1]);
  img.width = 30;
  img.rgb.assign(30 * 42 * 3, 0);
  try {
    preprocess(img, PreprocessMode::None);
    FAIL() << "expected an Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("multiples of the patch size 14"), std::string::npos)
        << e.what();
  }
}

TEST(Preprocess, FloatConversionAndBatchPadding) {
  Tensor a = Tensor::zeros({3, 2, 2}, DType::U8), b = Tensor::zeros({3, 4, 2}, DType::U8);
  a.data<uint8_t>()[0] = 51;
  const Tensor f = to_float01(a);
  EXPECT_EQ(f.dtype(), DType::F32);
  EXPECT_EQ(f.f32()[0], 51.0f / 255.0f);
  const Tensor batch = pad_batch_to_common_size({a, b});
  ASSERT_EQ(batch.shape(), (Shape{2, 3, 4, 2}));
  const uint8_t* p = batch.data<uint8_t>();
  EXPECT_EQ(p[0], 255);      // row 0 is padding for the 2-row frame
  EXPECT_EQ(p[1 * 2], 51);   // its first pixel lands on row 1
  EXPECT_EQ(p[3 * 2], 255);  // and row 3 is padding again
  const Tensor fb = pad_batch_to_common_size({to_float01(a), to_float01(b)});
  EXPECT_EQ(fb.f32()[0], 1.0f);
}

}  // namespace
}  // namespace lingbot
