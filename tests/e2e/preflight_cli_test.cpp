// `lingbot-map run` checks that a run fits in memory before the first frame: --dry-run prints
// the estimate, a run over the limit stops with one line, --no-preflight skips the check.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <string>

#include "test_util.h"

namespace lingbot {
namespace {

class PreflightCli : public test::TempDirTest {
 protected:
  std::string run_args() const {
    return "run --model synthetic:1 --arch tiny --input " + test::fixtures_dir() +
           "/tiny/frames --preprocess none --scale-frames 4 --window 6 --quiet --out " +
           path("out");
  }
};

TEST_F(PreflightCli, DryRunPrintsTheEstimateAndRunsNothing) {
  test::CliResult r = test::run_cli(run_args() + " --dry-run");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("memory estimate for 16 frames at 70x56 (F32), 16 frames cached"),
            std::string::npos)
      << r.output;
  for (const char* term : {"weights", "KV cache", "camera cache", "activations", "available"})
    EXPECT_NE(r.output.find(term), std::string::npos) << term << "\n" << r.output;
  EXPECT_FALSE(std::filesystem::exists(path("out/predictions.safetensors")));
}

TEST_F(PreflightCli, DryRunCountsKeyframesOnly) {
  test::CliResult r = test::run_cli(run_args() + " --keyframe-interval 3 --dry-run");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("8 frames cached"), std::string::npos) << r.output;  // 4 + 12 / 3
}

TEST_F(PreflightCli, OverTheLimitStopsWithOneLine) {
  test::CliResult r = test::run_cli(run_args() + " --memory-limit-gb 0.01");
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_EQ(r.output.rfind("lingbot-map: error: not enough memory for 16 frames at 70x56", 0), 0u)
      << r.output;
  EXPECT_NE(r.output.find("10 MB available"), std::string::npos) << r.output;
  EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << r.output;
  EXPECT_FALSE(std::filesystem::exists(path("out/predictions.safetensors")));
}

TEST_F(PreflightCli, NoPreflightSkipsTheCheck) {
  test::CliResult r = test::run_cli(run_args() + " --memory-limit-gb 0.01 --no-preflight");
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(std::filesystem::exists(path("out/predictions.safetensors")));
}

TEST_F(PreflightCli, AFittingRunPasses) {
  test::CliResult r = test::run_cli(run_args() + " --memory-limit-gb 4");
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(std::filesystem::exists(path("out/predictions.safetensors")));
}

// The "~N MB" total of a dry run's estimate line.
double estimate_mb(const std::string& output) {
  const size_t at = output.find(": ~");
  if (at == std::string::npos) return -1;
  const double v = std::stod(output.substr(at + 3));
  return output.compare(output.find(' ', at + 3) + 1, 2, "GB") == 0 ? v * 1000 : v;
}

// Windowed runs reset the caches per window: the estimate is that of one window.
TEST_F(PreflightCli, WindowedDryRunEstimatesOneWindow) {
  const test::CliResult streaming = test::run_cli(run_args() + " --dry-run");
  const test::CliResult r =
      test::run_cli(run_args() + " --mode windowed --window-size 6 --overlap 2 --dry-run");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("memory estimate for 16 frames at 70x56 (F32), windowed: 4 windows of "
                          "up to 6 frames, 6 frames cached per window: ~"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("available"), std::string::npos) << r.output;
  // 16 frames streamed through a window of 6 keep a special stream; 6-frame windows do not.
  EXPECT_GT(estimate_mb(r.output), 0) << r.output;
  EXPECT_LT(estimate_mb(r.output), estimate_mb(streaming.output)) << streaming.output;
  EXPECT_FALSE(std::filesystem::exists(path("out")));
}

TEST_F(PreflightCli, WindowedOverTheLimitSuggestsASmallerWindowThatFits) {
  const std::string windowed = run_args() + " --mode windowed --overlap 2 --memory-limit-gb 0.12";
  test::CliResult r = test::run_cli(windowed + " --window-size 12");
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_EQ(r.output.rfind("lingbot-map: error: not enough memory for 16 frames at 70x56", 0), 0u)
      << r.output;
  EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << r.output;
  EXPECT_FALSE(std::filesystem::exists(path("out/predictions.safetensors")));
  const size_t at = r.output.find("--window-size ");
  ASSERT_NE(at, std::string::npos) << r.output;
  const int size = std::stoi(r.output.substr(at + 14));
  EXPECT_LT(size, 12);
  r = test::run_cli(windowed + " --window-size " + std::to_string(size) + " --dry-run");
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("fits in 120 MB available"), std::string::npos) << r.output;
}

TEST_F(PreflightCli, WindowedFittingRunPasses) {
  test::CliResult r = test::run_cli(run_args() +
                                    " --mode windowed --window-size 6 --overlap 2 "
                                    "--memory-limit-gb 4");
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(std::filesystem::exists(path("out/predictions.safetensors")));
}

}  // namespace
}  // namespace lingbot
