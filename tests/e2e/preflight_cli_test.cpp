// `lingbot-map run` checks that a run fits in memory before the first frame: --dry-run prints
// the estimate, a run over the limit stops with one line, --no-preflight skips the check.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
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
  for (const char* term :
       {"weights", "KV cache", "camera cache", "activations", "available", "special stream",
        "first step", "one-frame steps", "depth-head plan", "scratch and GEMM workspace"})
    EXPECT_NE(r.output.find(term), std::string::npos) << term << "\n" << r.output;
  // The predictions file: 16 frames of two 70x56 F32 maps and their cameras, 0.5 MB.
  EXPECT_NE(r.output.find("predictions.safetensors: ~1 MB on disk"), std::string::npos) << r.output;
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

// A long sequence without files to match: one fixture frame linked under many names (a dry run
// and a refused run read only the first).
class LongPreflightCli : public PreflightCli {
 protected:
  std::string long_args(int frames) {
    std::filesystem::create_directories(path("long"));
    const std::string frame = test::fixtures_dir() + "/tiny/frames/000.png";
    for (int i = 0; i < frames; ++i) {
      char name[32];
      std::snprintf(name, sizeof name, "long/%05d.png", i);
      std::filesystem::create_symlink(frame, path(name));
    }
    return "run --model synthetic:1 --arch tiny --input " + path("long") +
           " --preprocess none --scale-frames 4 --window 6 --keyframe-interval 1 --quiet --out " +
           path("out");
  }
};

// The special stream and the camera caches of 1,200 kept frames do not fit; a cap does.
TEST_F(LongPreflightCli, OverTheLimitNamesTheLargestSpecialFrameCapThatFits) {
  const std::string args = long_args(1200);
  const test::CliResult all = test::run_cli(args + " --dry-run");
  ASSERT_EQ(all.code, 0) << all.output;
  const double mb = estimate_mb(all.output);
  ASSERT_GT(mb, 0) << all.output;
  char limit[64];
  std::snprintf(limit, sizeof limit, " --memory-limit-gb %.3f", mb * 0.6 / 1000);
  const std::string limited = args + limit;

  test::CliResult r = test::run_cli(limited);
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_EQ(r.output.rfind("lingbot-map: error: not enough memory for 1200 frames at 70x56", 0), 0u)
      << r.output;
  EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << r.output;
  const size_t at = r.output.find("--max-special-frames ");
  ASSERT_NE(at, std::string::npos) << r.output;
  const int cap = std::stoi(r.output.substr(at + 21));
  EXPECT_GT(cap, 0);
  EXPECT_LT(cap, 1200 - 4 - 6);
  // The dry run names the same cap; it fits, one more does not.
  r = test::run_cli(limited + " --dry-run");
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("--max-special-frames " + std::to_string(cap)), std::string::npos)
      << r.output;
  r = test::run_cli(limited + " --dry-run --max-special-frames " + std::to_string(cap));
  EXPECT_NE(r.output.find("fits in"), std::string::npos) << r.output;
  r = test::run_cli(limited + " --dry-run --max-special-frames " + std::to_string(cap + 1));
  EXPECT_NE(r.output.find("needs ~"), std::string::npos) << r.output;
  EXPECT_FALSE(std::filesystem::exists(path("out/predictions.safetensors")));
}

TEST_F(LongPreflightCli, DryRunNotesCachesThatGrowWithTheSequence) {
  const std::string args = long_args(1200);
  test::CliResult r = test::run_cli(args + " --dry-run --memory-limit-gb 4");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("fits in 4.0 GB available\nnote: "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("grow with the number of frames; --max-special-frames N bounds them"),
            std::string::npos)
      << r.output;
  // Capped, or short: nothing to note.
  r = test::run_cli(args + " --dry-run --memory-limit-gb 4 --max-special-frames 100");
  EXPECT_EQ(r.output.find("note:"), std::string::npos) << r.output;
  r = test::run_cli(run_args() + " --dry-run --memory-limit-gb 4");
  EXPECT_EQ(r.output.find("note:"), std::string::npos) << r.output;
}

// Windowed mode: the KV pool is sized by what a window holds (4 scale frames + 2 keyframes),
// not by a longer sliding window.
TEST_F(PreflightCli, WindowedEstimateIgnoresASlidingWindowLongerThanTheWindow) {
  std::string windowed = run_args() + " --mode windowed --window-size 6 --overlap 2 --dry-run";
  windowed.erase(windowed.find(" --window 6"), 11);
  const test::CliResult a = test::run_cli(windowed + " --window 64");
  const test::CliResult b = test::run_cli(windowed + " --window 2");
  ASSERT_EQ(a.code, 0) << a.output;
  ASSERT_EQ(b.code, 0) << b.output;
  // The estimates only: the lines after them report the memory free at that moment, which
  // differs between the two runs.
  EXPECT_GT(estimate_mb(a.output), 0) << a.output;
  EXPECT_EQ(estimate_mb(a.output), estimate_mb(b.output)) << a.output << b.output;
}

// The results the outputs keep on the host are part of the estimate: more with GLB points.
TEST_F(PreflightCli, DryRunCountsTheResultsKeptForTheOutputs) {
  const test::CliResult plain = test::run_cli(run_args() + " --dry-run");
  const test::CliResult glb =
      test::run_cli(run_args() + " --dry-run --export glb --point-stride 1");
  ASSERT_EQ(plain.code, 0) << plain.output;
  ASSERT_EQ(glb.code, 0) << glb.output;
  EXPECT_NE(plain.output.find(", results "), std::string::npos) << plain.output;
  EXPECT_GT(estimate_mb(glb.output), estimate_mb(plain.output)) << glb.output;
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
