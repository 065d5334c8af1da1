// The run's loop-closure wiring (src/run/loop_closing.h, what lingbot::run drives) with a known
// answer: a synthetic drifted trajectory streamed in as results (keyframes every other frame),
// an injected loop edge, and the outputs a run writes at its end. The optimized poses in
// predictions.safetensors, the _optimized trajectory twins and the rewritten point cloud must be
// those of a PoseGraph given the same keyframes and loop and solved directly.
#include "run/loop_closing.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "lingbot/eval.h"
#include "lingbot/exports.h"
#include "lingbot/loop.h"
#include "loop_test_util.h"
#include "weights/safetensors.h"

namespace lingbot {
namespace {

namespace fs = std::filesystem;

constexpr int kH = 2, kW = 3;

FrameResult frame(int64_t index, bool keyframe, const Sim3& pose) {
  FrameResult r;
  r.index = index;
  r.keyframe = keyframe;
  r.height = kH;
  r.width = kW;
  r.c2w = pose.rt();
  const Sim3 inv = Sim3::from_c2w(r.c2w.data()).inverse();
  r.w2c = inv.rt();
  for (int k = 0; k < 3; ++k) r.pose_enc[k] = r.c2w[k * 4 + 3];
  for (int k = 0; k < 4; ++k) r.pose_enc[3 + k] = static_cast<float>(pose.q[k]);
  r.pose_enc[7] = r.pose_enc[8] = 1.2f;
  r.intrinsics = {2, 0, 1.5f, 0, 2, 1, 0, 0, 1};
  for (int p = 0; p < kH * kW; ++p) {
    r.depth.push_back(2.0f + 0.25f * static_cast<float>(p));
    r.confidence.push_back(5.0f);
  }
  return r;
}

std::string read_text(const fs::path& p) {
  std::ifstream f(p);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

class LoopClosingWiring : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!loop_closure_available()) GTEST_SKIP() << "built without Ceres";
    dir_ = fs::temp_directory_path() /
           ("lingbot_loopwire_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    // One lap of 60 keyframes drifting in scale and yaw as the pose-graph tests model it; the last
    // keyframe is back beside the first. Frames: keyframe k is frame 2k, frame 2k + 1 a step ahead
    // of it.
    tr_ = loop_test::make_trajectory(60, 1, 0.003, 0.0005, 11);
    for (size_t k = 0; k < tr_.streamed.size(); ++k) {
      Sim3 ahead;
      ahead.t = {0.05, 0, 0.2};
      results_.push_back(frame(2 * k, true, tr_.streamed[k]));
      results_.push_back(frame(2 * k + 1, false, tr_.streamed[k] * ahead));
    }
    std::mt19937 rng(5);
    PoseEdge z = loop_test::true_loop(tr_, 0, 59, rng, 0.002, 0.01, 0.002);
    loop_.query = 118;
    loop_.match = 0;
    loop_.accepted = true;
    loop_.edge = {0, 118, z.relative, 100};
  }
  void TearDown() override {
    if (!dir_.empty()) fs::remove_all(dir_);
  }

  // What lingbot::run does with the closing, around the predictions and the exports.
  LoopClosing::Poses stream(const std::vector<LoopEdge>& edges, RunReport& report) {
    ExportOptions ex;
    ex.out_dir = dir_.string();
    ex.formats = parse_export_list("tum,kitti,ply");
    ex.points.stride = 1;
    auto sinks = make_sinks(ex);
    PredictionsWriter predictions((dir_ / "predictions.safetensors").string());
    LoopClosing closing(LoopClosing::Config{}, nullptr);  // no detector: the edge is injected
    EXPECT_TRUE(closing.closes());
    for (const FrameResult& r : results_) {
      closing.add(r, nullptr);
      predictions.add(r);
      for (auto& s : sinks) s->add(r, nullptr);
    }
    for (const LoopEdge& e : edges) closing.add_edge(e);
    closing.finish(report);
    predictions.set_optimized(closing.optimized().c2w, closing.optimized().scale);
    predictions.finish();
    for (auto& s : sinks) s->finish();
    closing.write_exports(ex, nullptr, report);
    return closing.optimized();
  }

  fs::path dir_;
  loop_test::Trajectory tr_;
  std::vector<FrameResult> results_;
  LoopEdge loop_;
};

TEST_F(LoopClosingWiring, ExportsWhatAPoseGraphSolvedDirectlyGives) {
  RunReport report;
  const LoopClosing::Poses poses = stream({loop_}, report);
  ASSERT_FALSE(report.loop_solves.empty());
  ASSERT_FALSE(report.loop_solves.back().summary.loops.empty());
  const LoopOutcome& outcome = report.loop_solves.back().summary.loops.back();
  ASSERT_TRUE(poses.corrected) << outcome.reason << " " << outcome.residual;
  ASSERT_TRUE(report.loop_closure);
  ASSERT_EQ(report.loop_edges.size(), 1u);
  ASSERT_FALSE(report.loop_solves.empty());
  EXPECT_EQ(report.loop_solves.back().summary.accepted, 1);

  // The same keyframes and loop, solved here.
  PoseGraph graph;
  std::vector<std::array<float, 12>> streamed;
  for (const FrameResult& r : results_) {
    streamed.push_back(r.c2w);
    if (r.keyframe) graph.add_node(r.index, Sim3::from_c2w(r.c2w.data()));
  }
  graph.add_loop(loop_.edge);
  const PoseGraphSummary summary = graph.optimize();
  EXPECT_EQ(summary.accepted, 1);
  const std::vector<Sim3> expected = graph.corrections().correct_all(streamed);
  // The loop pulled the end of the lap a long way: the comparison below is not of two
  // identities.
  const Sim3& last = expected.back();
  const std::array<float, 12>& last_streamed = streamed.back();
  EXPECT_GT(std::hypot(last.t[0] - last_streamed[3], last.t[1] - last_streamed[7],
                       last.t[2] - last_streamed[11]),
            0.5);

  const SafetensorsFile file = read_safetensors((dir_ / "predictions.safetensors").string());
  const float* c2w = file.tensors.at("c2w_optimized").f32();
  const float* w2c = file.tensors.at("w2c_optimized").f32();
  const float* scale = file.tensors.at("scale_optimized").f32();
  ASSERT_EQ(file.tensors.at("c2w_optimized").shape(), (Shape{120, 3, 4}));
  ASSERT_EQ(file.tensors.at("scale_optimized").shape(), (Shape{120}));
  const eval::Trajectory tum =
      eval::read_trajectory((dir_ / "trajectory_tum_optimized.txt").string());
  const eval::Trajectory kitti =
      eval::read_trajectory((dir_ / "trajectory_kitti_optimized.txt").string());
  ASSERT_EQ(tum.size(), 120u);
  ASSERT_EQ(kitti.size(), 120u);
  for (size_t i = 0; i < expected.size(); ++i) {
    const std::array<float, 12> want = expected[i].rt();
    for (int k = 0; k < 12; ++k) {
      EXPECT_NEAR(c2w[12 * i + k], want[k], 1e-5) << "frame " << i << " element " << k;
      EXPECT_NEAR(kitti.poses[i][k], want[k], 1e-5) << "frame " << i << " element " << k;
    }
    for (int k : {3, 7, 11}) EXPECT_NEAR(tum.poses[i][k], want[k], 1e-5) << i;
    EXPECT_NEAR(scale[i], expected[i].s, 1e-6 * expected[i].s) << i;
    // w2c_optimized is c2w_optimized's rigid inverse.
    const Sim3 inv = Sim3::from_c2w(&c2w[12 * i]).inverse();
    const std::array<float, 12> w = inv.rt();
    for (int k = 0; k < 12; ++k) EXPECT_NEAR(w2c[12 * i + k], w[k], 1e-5) << i;
  }
  // The streamed trajectory is still there as it was.
  const eval::Trajectory tum_streamed =
      eval::read_trajectory((dir_ / "trajectory_tum.txt").string());
  EXPECT_NEAR(tum_streamed.poses[118][3], streamed[118][3], 1e-6);

  // The point cloud rewritten from the optimized poses: pixel (u, v) at depth d of frame i at
  // its optimized similarity applied to d K^-1 (u, v, 1) (its scale multiplies the depth).
  const eval::PointCloud cloud = eval::read_ply((dir_ / "points.ply").string());
  ASSERT_EQ(cloud.size(), static_cast<size_t>(120 * kH * kW));
  size_t at = 0;
  for (size_t i = 0; i < expected.size(); ++i)
    for (int v = 0; v < kH; ++v)
      for (int u = 0; u < kW; ++u, ++at) {
        const double d = results_[i].depth[v * kW + u];
        const auto want = expected[i].act({(u - 1.5) * d / 2, (v - 1.0) * d / 2, d});
        for (int k = 0; k < 3; ++k)
          EXPECT_NEAR(cloud.xyz[3 * at + k], want[k], 1e-4 * (1 + std::abs(want[k])))
              << "frame " << i << " pixel " << u << "," << v;
      }
  EXPECT_FALSE(fs::exists(dir_ / ".loop-closure.partial"));
}

TEST_F(LoopClosingWiring, WithoutAnAcceptedLoopTheOptimizedPosesAreTheStreamedOnesBitForBit) {
  // An edge the model's checks dropped never reaches the graph.
  LoopEdge dropped = loop_;
  dropped.accepted = false;
  dropped.reason = "rotation";
  RunReport report;
  const LoopClosing::Poses poses = stream({dropped}, report);
  EXPECT_FALSE(poses.corrected);
  EXPECT_TRUE(report.loop_closure);
  EXPECT_EQ(report.loop_edges.size(), 1u);
  EXPECT_TRUE(report.loop_solves.empty());
  const std::string ply_before = read_text(dir_ / "points.ply");
  const SafetensorsFile file = read_safetensors((dir_ / "predictions.safetensors").string());
  const Tensor &c2w = file.tensors.at("c2w"), &opt = file.tensors.at("c2w_optimized");
  ASSERT_EQ(opt.shape(), c2w.shape());
  EXPECT_EQ(std::memcmp(opt.raw(), c2w.raw(), c2w.nbytes()), 0);
  EXPECT_EQ(std::memcmp(file.tensors.at("w2c_optimized").raw(), file.tensors.at("w2c").raw(),
                        c2w.nbytes()),
            0);
  for (int64_t i = 0; i < 120; ++i) EXPECT_EQ(file.tensors.at("scale_optimized").f32()[i], 1.0f);
  EXPECT_EQ(read_text(dir_ / "trajectory_tum_optimized.txt"),
            read_text(dir_ / "trajectory_tum.txt"));
  EXPECT_EQ(read_text(dir_ / "trajectory_kitti_optimized.txt"),
            read_text(dir_ / "trajectory_kitti.txt"));
  EXPECT_EQ(read_text(dir_ / "points.ply"), ply_before);
}

}  // namespace
}  // namespace lingbot
