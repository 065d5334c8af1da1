// `lingbot-map render` on a real run of the fixture model: frames that are not blank and change
// along the trajectory, the video decoded back, and one clear line for each kind of bad input
// with what was already written left intact.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "lingbot/image.h"
#include "lingbot/render.h"
#include "lingbot/result.h"
#include "lingbot/source.h"
#include "test_util.h"

namespace lingbot {
namespace {

namespace fs = std::filesystem;

// Pixels further than `tolerance` from the background in some channel.
int64_t drawn(const uint8_t* rgb, int64_t pixels, int tolerance = 8) {
  int64_t n = 0;
  for (int64_t i = 0; i < pixels; ++i)
    for (int k = 0; k < 3; ++k)
      if (std::abs(int(rgb[3 * i + k]) - int(kViewBackground[k])) > tolerance) {
        ++n;
        break;
      }
  return n;
}

int64_t differing(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b, int tolerance) {
  int64_t n = 0;
  for (size_t i = 0; i + 2 < std::min(a.size(), b.size()); i += 3)
    for (int k = 0; k < 3; ++k)
      if (std::abs(int(a[i + k]) - int(b[i + k])) > tolerance) {
        ++n;
        break;
      }
  return n;
}

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

class RenderCli : public ::testing::Test {
 protected:
  // One run of the fixture model with its input images, shared by the tests.
  static void SetUpTestSuite() {
    dir_ = fs::temp_directory_path() / ("lingbot_render_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
    const test::CliResult r =
        test::run_cli("run --model synthetic:1 --arch tiny --input " + test::fixtures_dir() +
                      "/tiny/frames --preprocess none --scale-frames 4 --window 6 --quiet --out " +
                      result() + " --export images");
    ASSERT_EQ(r.code, 0) << r.output;
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }
  static std::string path(const std::string& name) { return (dir_ / name).string(); }
  static std::string result() { return path("result"); }
  static constexpr int kFrames = 16;
  static fs::path dir_;
};
fs::path RenderCli::dir_;

TEST_F(RenderCli, PngFramesAreNotBlankAndChangeAlongTheTrajectory) {
  for (const char* camera : {"follow", "birdeye", "static"}) {
    const std::string out = path(std::string("png_") + camera);
    const test::CliResult r = test::run_cli("render " + result() + " --out " + out +
                                            " --size 160x120 --camera " + camera);
    ASSERT_EQ(r.code, 0) << r.output;
    EXPECT_NE(r.output.find("render: 16 frames 160x120"), std::string::npos) << r.output;
    std::vector<ImageU8> frames;
    for (int t = 0; t < kFrames; ++t)
      frames.push_back(load_image(out + "/" + default_frame_name(t)));
    EXPECT_FALSE(fs::exists(out + "/" + default_frame_name(kFrames)));
    for (int t = 0; t < kFrames; ++t) {
      ASSERT_EQ(frames[t].width, 160);
      ASSERT_EQ(frames[t].height, 120);
      // Not blank: points (coloured from images/) and cameras are drawn. (The synthetic
      // weights' geometry is degenerate: some frames' points lie on one line.)
      EXPECT_GT(drawn(frames[t].rgb.data(), 160 * 120), 40) << camera << " " << t;
    }
    // Along the trajectory the picture changes: points are added (and the follow camera moves).
    for (int t = 4; t < kFrames; t += 4)
      EXPECT_GT(differing(frames[t - 4].rgb, frames[t].rgb, 8), 20) << camera << " " << t;
    EXPECT_GT(drawn(frames.back().rgb.data(), 160 * 120), drawn(frames[0].rgb.data(), 160 * 120))
        << camera;
  }
}

TEST_F(RenderCli, TheVideoDecodesBackFrameForFrame) {
  const std::string out = path("new/folder/fly.mp4");  // made as needed
  const test::CliResult r =
      test::run_cli("render " + result() + " --out " + out + " --size 160x120 --fps 8");
  ASSERT_EQ(r.code, 0) << r.output;
  if (!video_encoding_supported()) {  // PNG frames beside the name instead
    EXPECT_TRUE(fs::exists(path("new/folder/fly/frame_000015.png"))) << r.output;
    GTEST_SKIP() << "no FFmpeg in this build: PNG frames checked only";
  }
  EXPECT_NE(r.output.find("video: " + out), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(out + ".part"));
  auto source = open_source(out, {.fps = 0, .exact_count = true, .quiet = true},
                            [](const ImageU8& img) { return to_tensor(img); });
  EXPECT_EQ(source->count(), kFrames);
  // The renderer's own frames, to compare the decoded ones with (lossy: a loose tolerance).
  const RunResult run = read_result(result());
  const Renderer renderer(run, {.width = 160, .height = 120});
  int64_t decoded = 0;
  std::vector<uint8_t> first, last;
  while (auto f = source->get(decoded)) {
    ASSERT_EQ(f->shape(), (Shape{3, 120, 160}));
    std::vector<uint8_t> rgb(160 * 120 * 3);
    for (int64_t i = 0; i < 160 * 120; ++i)
      for (int k = 0; k < 3; ++k)
        rgb[3 * i + k] = static_cast<uint8_t>(std::lround(f->f32()[k * 160 * 120 + i] * 255));
    EXPECT_GT(drawn(rgb.data(), 160 * 120, 24), 40) << decoded;
    const ImageU8 want = renderer.render(decoded);
    // Most pixels agree closely with the rendering (compression blurs the edges of splats).
    EXPECT_LT(differing(rgb, want.rgb, 48), 160 * 120 / 10) << decoded;
    (decoded == 0 ? first : last) = rgb;
    ++decoded;
  }
  EXPECT_EQ(decoded, kFrames);
  EXPECT_GT(differing(first, last, 24), 160 * 120 / 100);
}

TEST_F(RenderCli, BadInputIsOneLineAndLeavesOutputsIntact) {
  const std::string good = path("good");
  ASSERT_EQ(test::run_cli("render " + result() + " --out " + good + " --size 64x48").code, 0);
  const std::string before = slurp(good + "/frame_000003.png");
  ASSERT_FALSE(before.empty());
  const std::string keep = " --out " + good;

  test::expect_clean_cli_failure("render " + path("missing") + keep, "no predictions file");
  // An incomplete result: the predictions file cut short, or a folder without one.
  fs::create_directories(path("cut"));
  const std::string whole = slurp(result() + "/predictions.safetensors");
  std::ofstream(path("cut/predictions.safetensors"), std::ios::binary)
      << whole.substr(0, whole.size() / 2);
  const test::CliResult cut = test::run_cli("render " + path("cut") + keep);
  EXPECT_EQ(cut.code, 1) << cut.output;
  EXPECT_EQ(std::count(cut.output.begin(), cut.output.end(), '\n'), 1) << cut.output;
  EXPECT_EQ(cut.output.rfind("lingbot-map: error: ", 0), 0u) << cut.output;
  fs::create_directories(path("empty"));
  test::expect_clean_cli_failure("render " + path("empty") + keep, "no predictions file");
  // Options.
  test::expect_clean_cli_failure("render " + result() + keep + " --camera orbit", "--camera");
  test::expect_clean_cli_failure("render " + result() + keep + " --size 100", "bad size '100'");
  test::expect_clean_cli_failure("render " + result() + keep + " --size 641x480", "even sides");
  test::expect_clean_cli_failure("render " + result() + keep + " --fps 0", "--fps");
  test::expect_clean_cli_failure("render " + result() + " --out " + result() + "/images/",
                                 "the result's images folder");
  // Unwritable outputs: under a file, and a video named where a folder is.
  std::ofstream(path("a_file")) << "x";
  test::expect_clean_cli_failure("render " + result() + " --out " + path("a_file/frames"),
                                 "cannot create output folder");
  if (video_encoding_supported()) {
    test::expect_clean_cli_failure("render " + result() + " --out " + path("a_file/fly.mp4"),
                                   "cannot create output folder");
    test::expect_clean_cli_failure("render " + result() + " --out /proc/fly.mp4",
                                   "cannot write /proc/fly.mp4");
    fs::create_directories(path("folder.mp4"));
    test::expect_clean_cli_failure("render " + result() + " --out " + path("folder.mp4"),
                                   "it is a folder");
  }
  EXPECT_EQ(slurp(good + "/frame_000003.png"), before);
  EXPECT_EQ(load_image(good + "/frame_000003.png").width, 64);
}

TEST_F(RenderCli, AVideoThatFailsLeavesThePreviousOneValid) {
  if (!video_encoding_supported()) GTEST_SKIP() << "no FFmpeg in this build";
  const std::string out = path("keep.mp4");
  ASSERT_EQ(test::run_cli("render " + result() + " --out " + out + " --size 64x48").code, 0);
  const std::string before = slurp(out);
  // The result's images made unreadable: the rendering stops before anything is renamed.
  const std::string broken = path("broken");
  fs::copy(result(), broken, fs::copy_options::recursive);
  std::ofstream(broken + "/images/005.png", std::ios::binary) << "not a png";
  const test::CliResult r = test::run_cli("render " + broken + " --out " + out + " --size 64x48");
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_NE(r.output.find("005.png"), std::string::npos) << r.output;
  EXPECT_EQ(slurp(out), before);
  EXPECT_FALSE(fs::exists(out + ".part"));
}

}  // namespace
}  // namespace lingbot
