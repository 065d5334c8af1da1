// `run --loop-closure` end to end on real photographs with the tiny synthetic model: its
// geometry is meaningless and so is its place descriptor's ranking, so every older keyframe is
// made a candidate (top-k above their number, no similarity floor) and the geometric check alone
// decides. The office loop's revisit must be found between its two groups, and only there; the
// Oxford walk, which never returns within its frames, must give none.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "lingbot/loop.h"
#include "test_util.h"

namespace lingbot {
namespace {

namespace fs = std::filesystem;

class LoopCli : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!loop_detection_available()) GTEST_SKIP() << "built without OpenCV";
    dir_ = fs::temp_directory_path() /
           ("lingbot_loop_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override {
    if (!dir_.empty()) fs::remove_all(dir_);
  }
  // Runs `input` (a folder of real/) with loop detection; the --json report.
  nlohmann::json run(const std::string& input, int min_gap) {
    const std::string folder = test::fixtures_dir() + "/real/" + input;
    if (!fs::is_directory(folder)) return {};
    const std::string json = (dir_ / "report.json").string();
    const test::CliResult r = test::run_cli(
        "run --model synthetic:1 --arch tiny --input " + folder + " --out " +
        (dir_ / "out").string() + " --scale-frames 4 --window 8 --quiet --loop-closure" +
        " --loop-min-gap " + std::to_string(min_gap) +
        " --loop-top-k 64 --loop-min-similarity -1 --json " + json);
    EXPECT_EQ(r.code, 0) << r.output;
    std::ifstream f(json);
    return f ? nlohmann::json::parse(f) : nlohmann::json{};
  }
  fs::path dir_;
};

// Frames 0-11 of the loop are run frames 0-11, its frames 225-236 run frames 12-23.
TEST_F(LoopCli, OfficeRevisitIsFoundBetweenTheTwoGroups) {
  // A gap of 12: each frame of the second group may match any of the first group before it,
  // and no frame of the first group may match another of it.
  const nlohmann::json j = run("loop", 12);
  if (j.is_null()) GTEST_SKIP() << "no real/loop fixture";
  ASSERT_TRUE(j.contains("loops")) << j.dump();
  const auto& d = j["loop_detection"];
  EXPECT_EQ(d["keyframes"], 24);
  EXPECT_EQ(d["skipped"], 0);
  EXPECT_EQ(d["candidates"], 78);  // 1 + 2 + ... + 12: every eligible pair verified
  ASSERT_GE(j["loops"].size(), 1u) << j.dump();
  for (const auto& l : j["loops"]) {
    EXPECT_GE(l["query"].get<int>(), 12) << l.dump();
    EXPECT_LE(l["match"].get<int>(), 11) << l.dump();
    EXPECT_GE(l["inliers"].get<int>(), LoopOptions{}.min_inliers) << l.dump();
    EXPECT_GE(l["inlier_ratio"].get<double>(), LoopOptions{}.min_inlier_ratio) << l.dump();
  }
  EXPECT_EQ(d["accepted"], j["loops"].size());
}

TEST_F(LoopCli, WalkThatNeverReturnsHasNoLoop) {
  // A gap of 2: every pair of frames 40 or more source frames apart is verified, and none passes.
  const nlohmann::json j = run("oxford", 2);
  if (j.is_null()) GTEST_SKIP() << "no real/oxford fixture";
  ASSERT_TRUE(j.contains("loops")) << j.dump();
  EXPECT_EQ(j["loop_detection"]["keyframes"], 14);
  EXPECT_EQ(j["loop_detection"]["candidates"], 78);  // 1 + 2 + ... + 12
  EXPECT_EQ(j["loops"].size(), 0u) << j.dump();
  EXPECT_EQ(j["loop_detection"]["accepted"], 0);
}

TEST(LoopCliArgs, WindowedModeIsRefusedInOneLine) {
  if (!loop_detection_available()) GTEST_SKIP() << "built without OpenCV";
  test::expect_clean_cli_failure("run --model synthetic:1 --arch tiny --input " +
                                     test::fixtures_dir() + "/tiny/frames --out " +
                                     (fs::temp_directory_path() / "lingbot_loop_args").string() +
                                     " --mode windowed --loop-closure",
                                 "streaming mode only");
}

}  // namespace
}  // namespace lingbot
