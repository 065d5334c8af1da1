// `lingbot-map eval` end to end: a table, JSON and a plot from files and from a run's
// predictions (with loop-closed poses beside the streamed ones), and one clear line for each
// kind of bad ground truth.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "lingbot/eval.h"
#include "lingbot/image.h"
#include "test_util.h"
#include "weights/safetensors.h"

namespace lingbot {
namespace {

const auto cli = test::run_cli;
const auto fails = test::expect_clean_cli_failure;

class EvalCli : public test::TempDirTest {
 protected:
  void SetUp() override {
    TempDirTest::SetUp();
    if (!eval::available()) GTEST_SKIP() << "built without Eigen / nanoflann";
  }
  void write(const std::string& name, const std::string& text) {
    std::ofstream(path(name)) << text;
  }
  // A circle of n poses in TUM format at 10 Hz, scaled by s, radius 2.
  static std::string circle(int n, double s, double t0 = 100.0, double wobble = 0) {
    std::string out = "# timestamp tx ty tz qx qy qz qw\n";
    for (int i = 0; i < n; ++i) {
      const double a = i * 2 * M_PI / n;
      char line[256];
      std::snprintf(line, sizeof line, "%.6f %.9f %.9f %.9f 0 %.9f 0 %.9f\n", t0 + 0.1 * i,
                    s * 2 * std::cos(a), s * (0.1 * std::sin(3 * a) + wobble * std::sin(7 * a)),
                    s * 2 * std::sin(a), std::sin(-a / 2), std::cos(-a / 2));
      out += line;
    }
    return out;
  }
};

TEST_F(EvalCli, TumFilesGiveATableJsonAndAPlot) {
  write("gt.txt", circle(40, 1.0));
  write("est.txt", circle(40, 0.25, 100.004, 0.01));  // a quarter of the scale, a little off
  const auto r = cli("eval " + path("est.txt") + " --gt " + path("gt.txt") + " --json " +
                     path("out.json") + " --plot " + path("plot.png"));
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("40 of 40 poses matched"), std::string::npos) << r.output;
  // The estimate is a quarter of the scale and a little off: the alignment's scale is about 4.
  const size_t at = r.output.find("Sim(3) alignment, scale ");
  ASSERT_NE(at, std::string::npos) << r.output;
  EXPECT_NEAR(std::stod(r.output.substr(at + 24)), 4.0, 1e-3) << r.output;
  EXPECT_NE(r.output.find("RPE rot (deg)"), std::string::npos) << r.output;
  std::ifstream f(path("out.json"));
  const auto j = nlohmann::json::parse(f).at("trajectory");
  EXPECT_EQ(j.at("matched"), 40);
  EXPECT_NEAR(j.at("scale").get<double>(), 4.0, 0.05);
  EXPECT_GT(j.at("ate").at("rmse").get<double>(), 0);
  EXPECT_LT(j.at("ate").at("rmse").get<double>(), 0.05);
  EXPECT_EQ(j.at("rpe_translation").at("count"), 39);
  const ImageU8 img = load_image(path("plot.png"));
  EXPECT_EQ(img.width, 1024);
  // --json - prints the JSON alone; SE(3) cannot undo the scale.
  const auto se3 =
      cli("eval " + path("est.txt") + " --gt " + path("gt.txt") + " --align se3 --json -");
  ASSERT_EQ(se3.code, 0) << se3.output;
  const auto k = nlohmann::json::parse(se3.output).at("trajectory");
  EXPECT_EQ(k.at("alignment"), "se3");
  EXPECT_GT(k.at("ate").at("rmse").get<double>(), 1.0);
}

// A run's predictions: timed by frame index against a KITTI file, with c2w_optimized beside c2w
// (what loop closure writes) both measured, and depth against maps from the same file.
TEST_F(EvalCli, PredictionsWithOptimizedPoses) {
  const int n = 12;
  std::vector<float> c2w, opt, depth(n * 2 * 3);
  std::string kitti;
  for (int i = 0; i < n; ++i) {
    const double a = i * 0.4;
    const float x = static_cast<float>(3 * std::cos(a)), z = static_cast<float>(3 * std::sin(a));
    for (const float v : {1.f, 0.f, 0.f, x, 0.f, 1.f, 0.f, 0.f, 0.f, 0.f, 1.f, z}) {
      opt.push_back(v);
      c2w.push_back(v);
    }
    c2w[c2w.size() - 9] += 0.05f * static_cast<float>(i);  // drift in x for the streamed poses
    char line[200];
    std::snprintf(line, sizeof line, "1 0 0 %.9g 0 1 0 0 0 0 1 %.9g\n", x, z);
    kitti += line;
  }
  for (size_t i = 0; i < depth.size(); ++i) depth[i] = 1.0f + 0.1f * static_cast<float>(i % 7);
  const auto tensor = [](std::vector<float>& v, Shape shape) {
    Tensor x = Tensor::zeros(std::move(shape));
    std::memcpy(x.data<float>(), v.data(), v.size() * sizeof(float));
    return x;
  };
  TensorMap t;
  t["c2w"] = tensor(c2w, {n, 3, 4});
  t["c2w_optimized"] = tensor(opt, {n, 3, 4});
  t["depth"] = tensor(depth, {n, 2, 3});
  std::filesystem::create_directories(path("run"));
  write_safetensors(path("run/predictions.safetensors"), t);
  write("gt.txt", kitti);
  std::string gt_depth = path("gtdepth.npy");
  {
    // The same maps twice as deep, float32 [n, 2, 3].
    std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (12, 2, 3), }";
    header.append((64 - (10 + header.size() + 1) % 64) % 64, ' ');
    header += '\n';
    std::ofstream f(gt_depth, std::ios::binary);
    f << std::string("\x93NUMPY\x01\x00", 8) << char(header.size()) << char(0) << header;
    for (float d : depth) {
      const float g = 2 * d;
      f.write(reinterpret_cast<const char*>(&g), 4);
    }
  }
  const auto r = cli("eval " + path("run") + " --gt " + path("gt.txt") + " --depth-gt " + gt_depth +
                     " --json " + path("o.json") + " --plot " + path("p.png"));
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("optimized poses (c2w_optimized)"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("orange: optimized"), std::string::npos) << r.output;
  std::ifstream f(path("o.json"));
  const auto j = nlohmann::json::parse(f);
  EXPECT_GT(j.at("trajectory").at("ate").at("rmse").get<double>(), 0.01);
  EXPECT_LT(j.at("trajectory_optimized").at("ate").at("rmse").get<double>(), 1e-5);
  EXPECT_NEAR(j.at("depth").at("scale").get<double>(), 2.0, 1e-6);
  EXPECT_NEAR(j.at("depth").at("abs_rel").get<double>(), 0.0, 1e-6);
  EXPECT_NEAR(j.at("depth").at("delta1").get<double>(), 1.0, 1e-12);
  // Frame-indexed against a different length: one line.
  std::string eleven;
  for (int i = 0, at = 0; i < 11; ++i) {
    const size_t e = kitti.find('\n', static_cast<size_t>(at));
    eleven += kitti.substr(static_cast<size_t>(at), e - static_cast<size_t>(at) + 1);
    at = static_cast<int>(e + 1);
  }
  write("eleven.txt", eleven);
  fails("eval " + path("run") + " --gt " + path("eleven.txt"),
        "mismatched lengths: " + path("run") + "/predictions.safetensors has 12 poses");
}

TEST_F(EvalCli, BadGroundTruthIsOneLineEach) {
  write("est.txt", circle(10, 1.0));
  const std::string est = "eval " + path("est.txt") + " --gt ";
  fails(est + path("missing.txt"), "no trajectory file: " + path("missing.txt"));
  // A missing timestamp: the line has 7 numbers.
  write("missing_t.txt", "100.0 1 2 3 0 0 0 1\n2 3 4 0 0 0 1\n");
  fails(est + path("missing_t.txt"), path("missing_t.txt") + ":2: 7 numbers; a TUM line has 8");
  write("dup.txt", "100.0 1 2 3 0 0 0 1\n100.1 1 2 3 0 0 0 1\n100.0 1 2 3 0 0 0 1\n");
  fails(est + path("dup.txt"), path("dup.txt") + ":3: timestamp 100 appears twice");
  write("junk.txt", "100.0 1 2 3 0 0 0 1\n100.1 1 2 oops 0 0 0 1\n");
  fails(est + path("junk.txt"), path("junk.txt") + ":2: 'oops' is not a finite number");
  // Two matches cannot fix a similarity.
  write("two.txt", circle(10, 1.0).substr(0, circle(10, 1.0).find("100.2")));
  fails(est + path("two.txt"), "too few matches: 2 of " + path("est.txt") +
                                   "'s 10 poses have a pose of " + path("two.txt"));
  // Times that never meet.
  write("late.txt", circle(10, 1.0, 500.0));
  fails(est + path("late.txt"), "too few matches: 0 of");
  // Depth maps of another size, and an option out of range.
  fails("eval --depth-gt " + path("none.npy") + " --depth " + path("none.npy"),
        "no depth file or folder");
  fails(est + path("late.txt") + " --max-time-diff 0", "maximum time difference must be > 0");
  fails("eval " + path("est.txt"), "eval needs ground truth");
}

}  // namespace
}  // namespace lingbot
