// What a newcomer meets in the first hour: the top level (version, a misspelt command), messages
// in the user's terms (flags and files, never internal tensors), one run per output folder with
// its run.json, a single image as input, and a run that says what it costs before it starts.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "io/image.h"
#include "lingbot/lingbot_c.h"
#include "test_util.h"
#include "weights/safetensors.h"

namespace lingbot {
namespace {

namespace fs = std::filesystem;

class FirstHour : public test::TempDirTest {
 protected:
  static std::string frames() { return test::fixtures_dir() + "/tiny/frames"; }
  static std::string tiny() {
    return "run --model synthetic:1 --arch tiny --preprocess none --scale-frames 4 --window 6 ";
  }
  bool have_fixtures() const { return fs::is_directory(frames()); }
  int64_t frames_in(const std::string& dir) const {
    return read_safetensors(dir + "/predictions.safetensors").tensors.at("pose_enc").dim(0);
  }
};

TEST_F(FirstHour, VersionFlagAndCommandPrintTheVersion) {
  for (const char* args : {"--version", "version"}) {
    const test::CliResult r = test::run_cli(args);
    EXPECT_EQ(r.code, 0) << args << ": " << r.output;
    EXPECT_NE(r.output.find(std::string("lingbot-map ") + lingbot_version()), std::string::npos)
        << args << ": " << r.output;
  }
  EXPECT_NE(test::run_cli("version").output.find("built with: cpu"), std::string::npos);
}

TEST_F(FirstHour, AMisspeltCommandIsNamedWithTheCommandsThereAre) {
  test::expect_clean_cli_failure("foo", "unknown command 'foo'");
  const test::CliResult r = test::run_cli("rnu --input x");
  EXPECT_NE(r.output.find("run, demo"), std::string::npos) << r.output;
}

TEST_F(FirstHour, BadNumbersAreRefusedInTheUsersTerms) {
  test::expect_clean_cli_failure(tiny() + "--input x --out o --threads -3", "--threads");
  // Widths the model cannot take name the flag, not a tensor shape.
  if (!have_fixtures()) GTEST_SKIP() << "no fixtures";
  for (const char* size : {"225", "0", "-14"}) {
    const std::string args = "run --model synthetic:1 --arch tiny --input " + frames() + " --out " +
                             path("o") + " --size " + size;
    test::expect_clean_cli_failure(args, std::string("--size ") + size);
    const test::CliResult r = test::run_cli(args);
    EXPECT_EQ(r.output.find("F32"), std::string::npos) << r.output;
    EXPECT_EQ(r.output.find("000000.png"), std::string::npos) << r.output;
  }
}

TEST_F(FirstHour, PreprocessTakesTheFlagNameRunUses) {
  if (!have_fixtures()) GTEST_SKIP() << "no fixtures";
  const std::string one = list_images(frames()).front();
  for (const char* flag : {"--preprocess", "--mode"}) {
    const test::CliResult r = test::run_cli("preprocess --input " + one + " " + flag +
                                            " pad --size 70 --out " + path(flag + 2));
    ASSERT_EQ(r.code, 0) << r.output;
    const ImageU8 img = load_image(path(flag + 2) + "/" + fs::path(one).stem().string() + ".png");
    EXPECT_EQ(img.width, 70);
    EXPECT_EQ(img.height, 70);
  }
}

TEST_F(FirstHour, OneImageIsASequenceOfOneFrame) {
  if (!have_fixtures()) GTEST_SKIP() << "no fixtures";
  const std::string one = list_images(frames()).front();
  const test::CliResult r =
      test::run_cli(tiny() + "--quiet --input " + one + " --out " + path("one") + " --export tum");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(frames_in(path("one")), 1);
}

TEST_F(FirstHour, RenderRefusesAFormatItDoesNotWrite) {
  if (!have_fixtures()) GTEST_SKIP() << "no fixtures";
  ASSERT_EQ(
      test::run_cli(tiny() + "--quiet --input " + frames() + " --first-k 5 --out " + path("r"))
          .code,
      0);
  test::expect_clean_cli_failure("render " + path("r") + " --out " + path("x.gif"), ".gif");
  EXPECT_FALSE(fs::exists(path("x.gif")));
}

TEST_F(FirstHour, DemoHelpShowsNoInternalDefaults) {
  const test::CliResult r = test::run_cli("demo --help");
  EXPECT_EQ(r.code, 0);
  EXPECT_NE(r.output.find("--no-render"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("{false}"), std::string::npos) << r.output;
}

TEST_F(FirstHour, AnOutputFolderHoldsOneRun) {
  if (!have_fixtures()) GTEST_SKIP() << "no fixtures";
  const std::string out = path("out");
  const std::string base = tiny() + "--quiet --input " + frames() + " --out " + out;
  ASSERT_EQ(test::run_cli(base + " --export tum,kitti,ply,images").code, 0);
  std::ofstream(out + "/notes.txt") << "the user's own file\n";
  // A second run into the same folder would mix the two: refused, and nothing is touched.
  test::expect_clean_cli_failure(base + " --first-k 5 --export tum", "--overwrite");
  EXPECT_EQ(frames_in(out), 16);
  // --overwrite clears what runs write there, and only that.
  const test::CliResult r = test::run_cli(base + " --first-k 5 --export tum --overwrite");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(frames_in(out), 5);
  for (const char* gone : {"trajectory_kitti.txt", "points.ply", "images"})
    EXPECT_FALSE(fs::exists(out + "/" + gone)) << gone;
  EXPECT_TRUE(fs::exists(out + "/trajectory_tum.txt"));
  EXPECT_TRUE(fs::exists(out + "/notes.txt"));
  // run.json: how the results were made.
  std::ifstream f(out + "/run.json");
  const auto j = nlohmann::json::parse(f);
  EXPECT_EQ(j["version"], lingbot_version());
  EXPECT_EQ(j["frames"].get<int64_t>(), 5);
  EXPECT_TRUE(j["complete"].get<bool>());
  EXPECT_EQ(j["model"]["arch"], "tiny");
  EXPECT_EQ(j["stream"]["scale_frames"].get<int>(), 4);
  EXPECT_EQ(j["exports"], nlohmann::json::array({"tum"}));
  EXPECT_NE(j["command"].dump().find("--overwrite"), std::string::npos);
  EXPECT_GT(j["seconds"].get<double>(), 0);
  // A folder of the user's files alone is fine.
  fs::create_directories(path("mine"));
  std::ofstream(path("mine/readme.txt")) << "x\n";
  EXPECT_EQ(
      test::run_cli(tiny() + "--quiet --input " + frames() + " --first-k 4 --out " + path("mine"))
          .code,
      0);
}

TEST_F(FirstHour, ARunSaysWhatItCostsAndWhereItIsFromTheStart) {
  if (!have_fixtures()) GTEST_SKIP() << "no fixtures";
  const test::CliResult r =
      test::run_cli(tiny() + "--input " + frames() + " --first-k 6 --out " + path("o"));
  ASSERT_EQ(r.code, 0) << r.output;
  for (const char* said : {"time estimate: ~", "loading synthetic:1 on cpu", "loaded tiny",
                           "phase 1: the first 4 frames", "frames/s"})
    EXPECT_NE(r.output.find(said), std::string::npos) << said << "\n" << r.output;
  // The dry run prints the time beside the memory; on a CPU the released model gets a hint.
  const test::CliResult d = test::run_cli("run --model synthetic:1 --input " + frames() +
                                          " --out " + path("d") + " --size 518 --dry-run");
  ASSERT_EQ(d.code, 0) << d.output;
  EXPECT_NE(d.output.find("memory estimate"), std::string::npos) << d.output;
  EXPECT_NE(d.output.find("time estimate: ~"), std::string::npos) << d.output;
  EXPECT_NE(d.output.find("--arch tiny"), std::string::npos) << d.output;
  // ... and never a way the run already takes: the tiny model at 518 is not told --arch tiny.
  const test::CliResult t =
      test::run_cli("run --model synthetic:1 --arch tiny --input " + frames() + " --out " +
                    path("t") + " --size 518 --threads 1 --dry-run");
  ASSERT_EQ(t.code, 0) << t.output;
  EXPECT_EQ(t.output.find("--arch tiny"), std::string::npos) << t.output;
  // --quiet is quiet.
  const test::CliResult q =
      test::run_cli(tiny() + "--quiet --input " + frames() + " --first-k 6 --out " + path("q"));
  ASSERT_EQ(q.code, 0) << q.output;
  EXPECT_EQ(q.output.find("loading"), std::string::npos) << q.output;
  EXPECT_EQ(q.output.find("phase 1"), std::string::npos) << q.output;
}

}  // namespace
}  // namespace lingbot
