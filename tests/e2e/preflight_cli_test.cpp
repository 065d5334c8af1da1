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

}  // namespace
}  // namespace lingbot
