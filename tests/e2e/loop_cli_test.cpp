// `run --loop-closure` end to end on real photographs with the tiny synthetic model: its
// geometry is meaningless and so is its place descriptor's ranking, so every older keyframe is
// made a candidate (top-k above their number, no similarity floor) and the geometric check alone
// decides. The office loop's revisit must be found between its two groups, and only there; the
// Oxford walk, which never returns within its frames, must give none. Where the pose graph is
// built in (Ceres), each run also holds the optimized poses and their exports' twins; with the
// synthetic weights the model's two-frame Sim(3) of a loop is meaningless, and the checks
// against the images' own geometry are what the office run shows.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <set>
#include <string>

#include "lingbot/eval.h"
#include "lingbot/loop.h"
#include "test_util.h"
#include "weights/safetensors.h"

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
        " --loop-top-k 64 --loop-min-similarity -1 --export tum,kitti,ply --json " + json);
    EXPECT_EQ(r.code, 0) << r.output;
    std::ifstream f(json);
    return f ? nlohmann::json::parse(f) : nlohmann::json{};
  }
  std::string out(const std::string& name) const { return (dir_ / "out" / name).string(); }
  static std::string text(const std::string& path) {
    std::ifstream f(path);
    return std::string(std::istreambuf_iterator<char>(f), {});
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
  if (!loop_closure_available()) return;

  // The pose graph: one loop a keyframe of the second group measured by the model, each between
  // the groups, every number of its checks reported.
  ASSERT_TRUE(j.contains("loop_closure")) << j.dump();
  const auto& c = j["loop_closure"];
  ASSERT_GE(c["edges"].size(), 1u) << c.dump();
  std::set<int> queries;
  for (const auto& e : c["edges"]) {
    EXPECT_GE(e["query"].get<int>(), 12) << e.dump();
    EXPECT_LE(e["match"].get<int>(), 11) << e.dump();
    EXPECT_TRUE(queries.insert(e["query"].get<int>()).second) << "two edges for one keyframe";
    EXPECT_GT(e["scale_query"].get<double>(), 0) << e.dump();
    EXPECT_GT(e["scale_match"].get<double>(), 0) << e.dump();
    EXPECT_GE(e["depth_pairs_query"].get<int>(), LoopEdgeOptions{}.min_depth_pairs) << e.dump();
    EXPECT_GE(e["rotation_error_deg"].get<double>(), 0) << e.dump();
    EXPECT_EQ(e["accepted"].get<bool>(), e["reason"].get<std::string>().empty()) << e.dump();
  }
  // Every keyframe with a verified loop got its edge (24 frames are well within the memory
  // kept for the two-frame blocks).
  std::set<int> looped;
  for (const auto& l : j["loops"]) looped.insert(l["query"].get<int>());
  EXPECT_EQ(queries, looped);
  EXPECT_EQ(c["unmeasured"], 0);
  EXPECT_GT(c["measure_s"].get<double>(), 0);

  // Both poses in the predictions and both trajectories on disk, each readable.
  ASSERT_TRUE(eval::predictions_have(out(""), "c2w_optimized"));
  ASSERT_TRUE(eval::predictions_have(out(""), "w2c_optimized"));
  const eval::Trajectory streamed = eval::read_trajectory(out(""));
  const eval::Trajectory optimized =
      eval::read_trajectory(out(""), eval::TrajectoryFormat::Predictions, "c2w_optimized");
  EXPECT_EQ(optimized.size(), 24u);
  EXPECT_EQ(eval::read_trajectory(out("trajectory_tum_optimized.txt")).size(), 24u);
  EXPECT_EQ(eval::read_trajectory(out("trajectory_kitti_optimized.txt")).size(), 24u);
  EXPECT_GT(eval::read_ply(out("points.ply")).size(), 0u);
  // A pose moves only where the last solve kept a loop.
  const bool kept = !c["solves"].empty() && c["solves"].back()["accepted"].get<int>() > 0;
  EXPECT_EQ(optimized.poses != streamed.poses, kept);
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
  if (!loop_closure_available()) return;

  // No loop, no solve: the optimized poses are written and are the streamed ones, bit for bit,
  // and so are the trajectories' twins.
  ASSERT_TRUE(j.contains("loop_closure")) << j.dump();
  EXPECT_EQ(j["loop_closure"]["edges"].size(), 0u);
  EXPECT_EQ(j["loop_closure"]["solves"].size(), 0u);
  const SafetensorsFile f = read_safetensors(out("predictions.safetensors"));
  const Tensor& c2w = f.tensors.at("c2w");
  ASSERT_EQ(f.tensors.at("c2w_optimized").shape(), c2w.shape());
  EXPECT_EQ(std::memcmp(f.tensors.at("c2w_optimized").raw(), c2w.raw(), c2w.nbytes()), 0);
  EXPECT_EQ(
      std::memcmp(f.tensors.at("w2c_optimized").raw(), f.tensors.at("w2c").raw(), c2w.nbytes()), 0);
  EXPECT_EQ(text(out("trajectory_tum_optimized.txt")), text(out("trajectory_tum.txt")));
  EXPECT_EQ(text(out("trajectory_kitti_optimized.txt")), text(out("trajectory_kitti.txt")));
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
