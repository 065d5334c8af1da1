// lingbot/eval.h on cases with answers computed by hand: Umeyama on known transforms, ATE of a
// known perturbation, RPE of 4 poses, association, depth and point-cloud metrics, the parsers.
#include "lingbot/eval.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>

#include "lingbot/error.h"
#include "lingbot/image.h"
#include "test_util.h"

namespace lingbot::eval {
namespace {

using P3 = std::array<double, 3>;

// Row-major rotation about a unit axis by `deg` degrees (Rodrigues).
std::array<double, 9> rotation(P3 axis, double deg) {
  const double a = deg * M_PI / 180, c = std::cos(a), s = std::sin(a), C = 1 - c;
  const double x = axis[0], y = axis[1], z = axis[2];
  return {c + x * x * C,     x * y * C - z * s, x * z * C + y * s, y * x * C + z * s, c + y * y * C,
          y * z * C - x * s, z * x * C - y * s, z * y * C + x * s, c + z * z * C};
}

std::array<double, 12> pose(const std::array<double, 9>& r, P3 t) {
  return {r[0], r[1], r[2], t[0], r[3], r[4], r[5], t[1], r[6], r[7], r[8], t[2]};
}

const std::array<double, 9> kIdentity{1, 0, 0, 0, 1, 0, 0, 0, 1};

Trajectory indexed(const std::vector<std::array<double, 12>>& poses, const char* name) {
  Trajectory t;
  t.name = name;
  t.indexed = true;
  t.poses = poses;
  for (size_t i = 0; i < poses.size(); ++i) t.stamps.push_back(static_cast<double>(i));
  return t;
}

class Eval : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!available()) GTEST_SKIP() << "built without Eigen / nanoflann";
  }
};

// Points mapped by a known similarity: Umeyama gives it back to rounding, with and without
// scale (for a rigid motion the scale must come out 1 even when the data has another).
TEST_F(Eval, UmeyamaRecoversAKnownSimilarity) {
  const double axis_n = std::sqrt(1.0 + 4.0 + 9.0);
  const auto r = rotation({1 / axis_n, 2 / axis_n, 3 / axis_n}, 37);
  const double s = 2.5;
  const P3 t{0.3, -1.2, 4.0};
  std::vector<P3> x, y, y_rigid;
  for (int i = 0; i < 7; ++i) {
    const P3 p{std::sin(i * 1.3) * 3, std::cos(i * 0.7) * 2, 0.5 * i - 1};
    x.push_back(p);
    P3 q, qr;
    for (int k = 0; k < 3; ++k) {
      const double rp = r[3 * k] * p[0] + r[3 * k + 1] * p[1] + r[3 * k + 2] * p[2];
      q[k] = s * rp + t[k];
      qr[k] = rp + t[k];
    }
    y.push_back(q);
    y_rigid.push_back(qr);
  }
  for (const bool with_scale : {true, false}) {
    const Similarity got = umeyama(x, with_scale ? y : y_rigid, with_scale);
    EXPECT_NEAR(got.scale, with_scale ? s : 1.0, 1e-12);
    for (int k = 0; k < 9; ++k) EXPECT_NEAR(got.rotation[k], r[k], 1e-12) << k;
    for (int k = 0; k < 3; ++k) EXPECT_NEAR(got.translation[k], t[k], 1e-12) << k;
  }
  // Too few points, and a set with no extent, say so.
  EXPECT_THROW(umeyama({x[0], x[1]}, {y[0], y[1]}, true), Error);
  EXPECT_THROW(umeyama({x[0], x[0], x[0]}, {y[0], y[1], y[2]}, true), Error);
}

// The ATE of an estimate that is the reference moved by a similarity is zero after Sim(3)
// alignment; without alignment, known offsets give their RMSE.
TEST_F(Eval, AteOfKnownPerturbations) {
  std::vector<std::array<double, 12>> ref, est, moved;
  const auto r = rotation({0, 0, 1}, 30);
  for (int i = 0; i < 6; ++i) {
    const P3 c{double(i), std::sin(i), 0.2 * i * i};
    ref.push_back(pose(kIdentity, c));
    const double off = 0.1 * (i + 1);  // along z: errors 0.1 .. 0.6
    est.push_back(pose(kIdentity, {c[0], c[1], c[2] + off}));
    P3 m;
    for (int k = 0; k < 3; ++k)
      m[k] = 0.5 * (r[3 * k] * c[0] + r[3 * k + 1] * c[1] + r[3 * k + 2] * c[2]) + 1.0;
    moved.push_back(pose(r, m));
  }
  TrajectoryOptions o;
  o.alignment = Alignment::None;
  const TrajectoryReport a = evaluate_trajectory(indexed(est, "est"), indexed(ref, "ref"), o);
  EXPECT_EQ(a.matched, 6u);
  const double sse = 0.01 + 0.04 + 0.09 + 0.16 + 0.25 + 0.36;
  EXPECT_NEAR(a.ate.rmse, std::sqrt(sse / 6), 1e-12);
  EXPECT_NEAR(a.ate.sse, sse, 1e-12);
  EXPECT_NEAR(a.ate.mean, 0.35, 1e-12);
  EXPECT_NEAR(a.ate.median, 0.35, 1e-12);
  EXPECT_NEAR(a.ate.min, 0.1, 1e-12);
  EXPECT_NEAR(a.ate.max, 0.6, 1e-12);
  EXPECT_NEAR(a.ate.std, std::sqrt(0.0291666666666666667), 1e-12);

  o.alignment = Alignment::Sim3;
  const TrajectoryReport b = evaluate_trajectory(indexed(moved, "est"), indexed(ref, "ref"), o);
  EXPECT_LT(b.ate.rmse, 1e-12);
  EXPECT_NEAR(b.transform.scale, 2.0, 1e-12);  // undoes the 0.5
  EXPECT_LT(b.rpe_translation.max, 1e-12);
  EXPECT_LT(b.rpe_rotation_deg.max, 1e-5);  // acos-free angle: no sqrt(eps) floor
  // SE(3) cannot undo the scale: the error stays.
  o.alignment = Alignment::SE3;
  EXPECT_GT(evaluate_trajectory(indexed(moved, "est"), indexed(ref, "ref"), o).ate.rmse, 0.1);
}

// RPE on 4 poses by hand. Reference: unit steps along x, no rotation. Estimate: the third pose
// at x = 2.5 and turned 10 degrees about z. E = (Q_i^-1 Q_j)^-1 (P_i^-1 P_j):
//   (0,1): identity; (1,2): t = (0.5, 0, 0), 10 deg;
//   (2,3): R = Rz(-10), t = Rz(-10) (0.5, 0, 0) - (1, 0, 0), |t|^2 = 1.25 - cos 10deg.
TEST_F(Eval, RpeOfFourPosesByHand) {
  std::vector<std::array<double, 12>> ref, est;
  for (int i = 0; i < 4; ++i) ref.push_back(pose(kIdentity, {double(i), 0, 0}));
  est = ref;
  est[2] = pose(rotation({0, 0, 1}, 10), {2.5, 0, 0});
  TrajectoryOptions o;
  o.alignment = Alignment::None;
  const TrajectoryReport r = evaluate_trajectory(indexed(est, "est"), indexed(ref, "ref"), o);
  const double e3 = std::sqrt(1.25 - std::cos(10 * M_PI / 180));
  ASSERT_EQ(r.rpe_translation.count, 3u);
  EXPECT_NEAR(r.rpe_translation.rmse, std::sqrt((0.25 + e3 * e3) / 3), 1e-12);
  EXPECT_NEAR(r.rpe_translation.mean, (0.5 + e3) / 3, 1e-12);
  EXPECT_NEAR(r.rpe_translation.median, 0.5, 1e-12);
  EXPECT_NEAR(r.rpe_translation.max, e3, 1e-12);
  EXPECT_NEAR(r.rpe_translation.min, 0, 1e-12);
  EXPECT_NEAR(r.rpe_rotation_deg.rmse, std::sqrt(200.0 / 3), 1e-9);
  EXPECT_NEAR(r.rpe_rotation_deg.max, 10, 1e-9);
  EXPECT_NEAR(r.rpe_rotation_deg.min, 0, 1e-9);

  // delta 2, consecutive: ids 0, 2 -> one pair (0, 2): t error 0.5, rotation 10.
  o.delta = 2;
  const TrajectoryReport d2 = evaluate_trajectory(indexed(est, "est"), indexed(ref, "ref"), o);
  ASSERT_EQ(d2.rpe_translation.count, 1u);
  EXPECT_NEAR(d2.rpe_translation.rmse, 0.5, 1e-12);
  // All pairs: (0, 2) and (1, 3); (1, 3): P = [I | (2, 0, 0)] against Q's (2, 0, 0): 0.
  o.all_pairs = true;
  const TrajectoryReport all = evaluate_trajectory(indexed(est, "est"), indexed(ref, "ref"), o);
  ASSERT_EQ(all.rpe_translation.count, 2u);
  EXPECT_NEAR(all.rpe_translation.max, 0.5, 1e-12);
  EXPECT_NEAR(all.rpe_translation.min, 0, 1e-12);
  // 1 m of path along the estimate (0, 1, 2.5, 3): reached at 1 and 2 -> the pair (1, 2).
  o.all_pairs = false;
  o.delta = 1;
  o.delta_unit = DeltaUnit::Meters;
  const TrajectoryReport m = evaluate_trajectory(indexed(est, "est"), indexed(ref, "ref"), o);
  ASSERT_EQ(m.rpe_translation.count, 1u);
  EXPECT_NEAR(m.rpe_translation.rmse, 0.5, 1e-12);
  // A delta that leaves no pair is an error, not an empty result.
  o.delta_unit = DeltaUnit::Frames;
  o.delta = 4;
  EXPECT_THROW(evaluate_trajectory(indexed(est, "est"), indexed(ref, "ref"), o), Error);
}

// associate.py's greedy choice: the closest pairs first, each pose once, strictly closer than
// the maximum; ties go to the earlier estimate.
TEST(EvalAssociate, GreedyUniqueNearest) {
  const auto m = associate({0, 1, 2, 3}, {0.005, 0.9, 1.01, 2.5, 3.015}, 0.02);
  const std::vector<std::pair<size_t, size_t>> want{{0, 0}, {1, 2}, {3, 4}};
  EXPECT_EQ(m, want);
  const auto tie = associate({1.0, 1.01}, {1.005}, 0.02);
  ASSERT_EQ(tie.size(), 1u);
  EXPECT_EQ(tie[0], (std::pair<size_t, size_t>{0, 0}));
  // 0.02 apart is not closer than 0.02.
  EXPECT_TRUE(associate({0.0}, {0.5}, 0.5).empty());
  // An offset moves the reference.
  EXPECT_EQ(associate({10.0}, {0.0}, 0.02, 10.0).size(), 1u);
}

TEST(EvalParse, TumAndKitti) {
  const Trajectory t = parse_tum(
      "# timestamp tx ty tz qx qy qz qw\n\n1.5 1 2 3 0 0 0 2\n2.5,4,5,6,0,0,0.7071067811865476,"
      "0.7071067811865476\r\n",
      "t.txt");
  ASSERT_EQ(t.size(), 2u);
  EXPECT_FALSE(t.indexed);
  EXPECT_EQ(t.stamps[1], 2.5);
  EXPECT_EQ(t.poses[0], (std::array<double, 12>{1, 0, 0, 1, 0, 1, 0, 2, 0, 0, 1, 3}));  // q scaled
  EXPECT_NEAR(t.poses[1][1], -1, 1e-12);  // 90 degrees about z: x' = -y
  EXPECT_NEAR(t.poses[1][4], 1, 1e-12);
  const Trajectory k = parse_kitti("1 0 0 1 0 1 0 2 0 0 1 3\n1 0 0 4 0 1 0 5 0 0 1 6\n", "k.txt");
  ASSERT_EQ(k.size(), 2u);
  EXPECT_TRUE(k.indexed);
  EXPECT_EQ(k.stamps[1], 1.0);
  EXPECT_EQ(k.poses[1][3], 4.0);

  const auto fails = [](auto parse, const char* text, const char* needle) {
    try {
      parse(text, std::string("f.txt"));
      ADD_FAILURE() << "no error for " << text;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  fails(parse_tum, "1 2 3 4 0 0 0 1\n2 2 3 4 0 0 1\n", "f.txt:2: 7 numbers");
  fails(parse_tum, "1 2 3 4 0 0 0 1\n1 2 3 4 0 0 0 1\n", "f.txt:2: timestamp 1 appears twice");
  fails(parse_tum, "1 2 x 4 0 0 0 1\n", "f.txt:1: 'x' is not a finite number");
  fails(parse_tum, "1 2 3 4 0 0 0 nan\n", "is not a finite number");
  fails(parse_tum, "1 2 3 4 0 0 0 0\n", "quaternion is zero");
  fails(parse_tum, "# nothing\n", "holds no poses");
  fails(parse_kitti, "1 0 0 1 0 1 0 2 0 0 1\n", "f.txt:1: 11 numbers");
  fails(parse_kitti, "2 0 0 1 0 1 0 2 0 0 1 3\n", "not a rotation");
}

// Mismatched frame-indexed lengths and too few matches are one clear error each.
TEST_F(Eval, MismatchedLengthsAndTooFewMatches) {
  std::vector<std::array<double, 12>> a(5, pose(kIdentity, {0, 0, 0})), b(6, a[0]);
  for (size_t i = 0; i < b.size(); ++i) b[i][3] = double(i);
  for (size_t i = 0; i < a.size(); ++i) a[i][3] = double(i);
  try {
    evaluate_trajectory(indexed(a, "a"), indexed(b, "b"), {});
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("mismatched lengths: a has 5 poses, b 6"),
              std::string::npos)
        << e.what();
  }
  Trajectory timed = indexed(b, "gt");
  timed.indexed = false;
  for (double& s : timed.stamps) s += 1000;
  try {
    evaluate_trajectory(indexed(a, "a"), timed, {});
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("too few matches: 0 of a's 5 poses"), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("--est-times"), std::string::npos) << e.what();
  }
}

DepthMaps maps(int64_t frames, int64_t h, int64_t w, std::vector<float> v) {
  DepthMaps d;
  d.frames = frames;
  d.height = h;
  d.width = w;
  d.values = std::move(v);
  d.name = "maps";
  return d;
}

// Valid pixels: (p, g) = (2, 1), (2, 2), (4, 4); the fourth has no reference depth.
// The CLI and Python translate option names through these; the reports say them back.
TEST(EvalOptions, NamesTranslateAndUnknownOnesAreRefused) {
  const TrajectoryOptions t = trajectory_options("se3", 0.5, 2, 3, "m", true);
  EXPECT_EQ(t.alignment, Alignment::SE3);
  EXPECT_EQ(t.max_time_diff, 0.5);
  EXPECT_EQ(t.time_offset, 2);
  EXPECT_EQ(t.delta, 3);
  EXPECT_EQ(t.delta_unit, DeltaUnit::Meters);
  EXPECT_TRUE(t.all_pairs);
  EXPECT_EQ(trajectory_options("sim3", 0, 0, 1, "frames", false).alignment, Alignment::Sim3);
  EXPECT_EQ(trajectory_options("none", 0, 0, 1, "frames", false).alignment, Alignment::None);
  const DepthOptions d = depth_options("lsq", true, 0.1, 10);
  EXPECT_EQ(d.scaling, DepthScaling::LeastSquares);
  EXPECT_TRUE(d.per_frame);
  EXPECT_EQ(d.min_depth, 0.1);
  EXPECT_EQ(d.max_depth, 10);
  EXPECT_EQ(depth_options("none", false, 0, 0).scaling, DepthScaling::None);
  EXPECT_EQ(parse_trajectory_format("kitti"), TrajectoryFormat::Kitti);
  EXPECT_EQ(parse_trajectory_format("predictions"), TrajectoryFormat::Predictions);
  try {
    parse_trajectory_format("euroc");
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument);
    EXPECT_STREQ(e.what(),
                 "the trajectory format must be 'auto', 'tum', 'kitti' or 'predictions', got "
                 "'euroc'");
  }
  EXPECT_THROW(depth_options("mean", false, 0, 0), Error);
}

TEST(EvalDepth, TinyMapsByHand) {
  const DepthMaps p = maps(1, 2, 2, {2, 2, 4, 1}), g = maps(1, 2, 2, {1, 2, 4, 0});
  DepthOptions o;
  o.scaling = DepthScaling::None;
  DepthReport r = evaluate_depth(p, g, o);
  EXPECT_EQ(r.pixels, 3u);
  EXPECT_NEAR(r.abs_rel, 1.0 / 3, 1e-12);
  EXPECT_NEAR(r.sq_rel, 1.0 / 3, 1e-12);
  EXPECT_NEAR(r.rmse, std::sqrt(1.0 / 3), 1e-12);
  EXPECT_NEAR(r.log_rmse, std::sqrt(std::log(2.0) * std::log(2.0) / 3), 1e-12);
  EXPECT_NEAR(r.delta1, 2.0 / 3, 1e-12);  // ratio 2 fails all three thresholds (1.95 < 2)
  EXPECT_NEAR(r.delta3, 2.0 / 3, 1e-12);
  o.scaling = DepthScaling::Median;  // medians 2 and 2
  EXPECT_NEAR(evaluate_depth(p, g, o).scale, 1.0, 1e-12);
  o.scaling = DepthScaling::LeastSquares;  // (2 + 4 + 16) / (4 + 4 + 16)
  r = evaluate_depth(p, g, o);
  EXPECT_NEAR(r.scale, 22.0 / 24, 1e-12);
  EXPECT_NEAR(r.abs_rel, (5.0 / 6 + 1.0 / 12 + 1.0 / 12) / 3, 1e-12);
  // Per frame: frame 0 (p 2, g 1) and frame 1 (p 1, g 4), median scales 0.5 and 4: exact.
  o.scaling = DepthScaling::Median;
  o.per_frame = true;
  r = evaluate_depth(maps(2, 1, 1, {2, 1}), maps(2, 1, 1, {1, 4}), o);
  EXPECT_NEAR(r.abs_rel, 0, 1e-12);
  EXPECT_NEAR(r.scale, 2.25, 1e-12);
  EXPECT_EQ(r.frames, 2);
  // Disagreeing sizes and no valid pixel are errors.
  EXPECT_THROW(evaluate_depth(maps(1, 1, 2, {1, 1}), maps(2, 1, 1, {1, 1}), o), Error);
  EXPECT_THROW(evaluate_depth(maps(1, 1, 2, {1, 1}), maps(1, 2, 1, {1, 1}), o), Error);
  EXPECT_THROW(evaluate_depth(maps(1, 1, 1, {1}), maps(1, 1, 1, {0}), o), Error);
}

class EvalFiles : public test::TempDirTest {};

TEST_F(EvalFiles, DepthFromPngAndNpy) {
  const uint16_t v[6] = {0, 1000, 2500, 65535, 1, 500};
  write_png_gray16(path("d.png"), 3, 2, v);
  const DepthMaps d = read_depth(path("d.png"), 1000);
  EXPECT_EQ(d.frames, 1);
  EXPECT_EQ(d.width, 3);
  EXPECT_EQ(d.height, 2);
  EXPECT_EQ(d.values, (std::vector<float>{0, 1, 2.5, 65.535f, 0.001f, 0.5}));
  // .npy float32 [2, 1, 2], format 1.0.
  std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 1, 2), }";
  header.append((64 - (10 + header.size() + 1) % 64) % 64, ' ');
  header += '\n';
  std::string file = std::string("\x93NUMPY\x01\x00", 8) + char(header.size()) + char(0) + header;
  const float f[4] = {1.5f, 2, 0, 4};
  file.append(reinterpret_cast<const char*>(f), sizeof f);
  std::ofstream(path("d.npy"), std::ios::binary) << file;
  const DepthMaps n = read_depth(path("d.npy"));
  EXPECT_EQ(n.frames, 2);
  EXPECT_EQ(n.values, (std::vector<float>{1.5, 2, 0, 4}));
  std::ofstream(path("bad.npy"), std::ios::binary) << file.substr(0, file.size() - 3);
  EXPECT_THROW(read_depth(path("bad.npy")), Error);
  EXPECT_THROW(read_depth(path("none.png")), Error);
}

// Depth PNGs go through the image reader's PNG decoder, so its guards hold here too: a chunk
// claiming more bytes than the file has, a file cut short and a PNG of another kind are one
// clear error each, never an allocation of the claimed size or a crash.
TEST_F(EvalFiles, DepthPngRefusesDamagedAndOtherPngs) {
  const uint16_t v[4] = {1, 2, 3, 4};
  write_png_gray16(path("d.png"), 2, 2, v);
  std::ifstream in(path("d.png"), std::ios::binary);
  const std::string good((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_EQ(good.substr(12, 4), "IHDR");
  // After IHDR (8 + 4 + 4 + 13 + 4 bytes): a text chunk declaring 2^31 - 16 bytes.
  std::string lying = good.substr(0, 33) + std::string("\x7f\xff\xff\xf0tEXtabc", 11);
  std::ofstream(path("lying.png"), std::ios::binary) << lying;
  auto message = [&](const std::string& file) -> std::string {
    try {
      read_depth(path(file));
    } catch (const Error& e) {
      return e.what();
    }
    return "no error";
  };
  EXPECT_NE(message("lying.png").find("ends early"), std::string::npos) << message("lying.png");
  std::ofstream(path("cut.png"), std::ios::binary) << good.substr(0, good.size() - 20);
  EXPECT_NE(message("cut.png").find("cut.png"), std::string::npos) << message("cut.png");
  ImageU8 rgb;
  rgb.width = rgb.height = 2;
  rgb.rgb.assign(12, 7);
  write_png(path("rgb.png"), rgb);
  EXPECT_NE(message("rgb.png").find("not a 16-bit greyscale PNG (bit depth 8, colour type 2)"),
            std::string::npos)
      << message("rgb.png");
  std::ofstream(path("text.png"), std::ios::binary) << "not a png";
  EXPECT_NE(message("text.png").find("is not a PNG file"), std::string::npos);
}

// pred {(0,0,0), (1,0,0)}, ref {(0,0,0.1), (1,0,0), (5,0,0)}: accuracy (0.1 + 0) / 2,
// completeness (0.1 + 0 + 4) / 3; at 0.5 precision 1, recall 2/3, F1 0.8.
TEST_F(Eval, PointCloudByHand) {
  PointCloud p, r;
  p.xyz = {0, 0, 0, 1, 0, 0};
  r.xyz = {0, 0, 0.1, 1, 0, 0, 5, 0, 0};
  const PointCloudReport m = evaluate_point_cloud(p, r, 0.5);
  EXPECT_NEAR(m.accuracy, 0.05, 1e-12);
  EXPECT_NEAR(m.completeness, 4.1 / 3, 1e-12);
  EXPECT_NEAR(m.chamfer, (0.05 + 4.1 / 3) / 2, 1e-12);
  EXPECT_NEAR(m.precision, 1, 1e-12);
  EXPECT_NEAR(m.recall, 2.0 / 3, 1e-12);
  EXPECT_NEAR(m.f1, 0.8, 1e-12);
  EXPECT_NEAR(m.accuracy_median, 0.05, 1e-12);
  EXPECT_NEAR(m.completeness_median, 0.1, 1e-12);
  EXPECT_THROW(evaluate_point_cloud(p, r, 0), Error);
  EXPECT_THROW(evaluate_point_cloud(PointCloud{}, r, 1), Error);
}

TEST(EvalPly, ThreeEncodings) {
  const std::string head =
      "ply\nformat %s 1.0\ncomment x\nelement vertex 2\nproperty float x\nproperty float y\n"
      "property double z\nproperty uchar red\nelement face 1\nproperty list uchar int "
      "vertex_indices\nend_header\n";
  const auto header = [&](const char* f) {
    char buf[512];
    std::snprintf(buf, sizeof buf, head.c_str(), f);
    return std::string(buf);
  };
  const PointCloud a = parse_ply(header("ascii") + "1 2 3 255\n4 5 6.5 0\n3 0 1 2\n", "a.ply");
  EXPECT_EQ(a.xyz, (std::vector<double>{1, 2, 3, 4, 5, 6.5}));
  std::string le = header("binary_little_endian"), be = header("binary_big_endian");
  for (const auto& [x, y, z] : {std::tuple{1.0f, 2.0f, 3.0}, std::tuple{4.0f, 5.0f, 6.5}}) {
    char buf[17];
    std::memcpy(buf, &x, 4);
    std::memcpy(buf + 4, &y, 4);
    std::memcpy(buf + 8, &z, 8);
    buf[16] = 7;
    le.append(buf, 17);
    std::reverse(buf, buf + 4);
    std::reverse(buf + 4, buf + 8);
    std::reverse(buf + 8, buf + 16);
    be.append(buf, 17);
  }
  EXPECT_EQ(parse_ply(le, "le.ply").xyz, a.xyz);
  EXPECT_EQ(parse_ply(be, "be.ply").xyz, a.xyz);
  EXPECT_THROW(parse_ply(le.substr(0, le.size() - 5), "cut.ply"), Error);
  EXPECT_THROW(parse_ply("ply\nformat ascii 1.0\nelement vertex 99999999\nproperty float x\n"
                         "property float y\nproperty float z\nend_header\n1 2 3\n",
                         "lie.ply"),
               Error);
  EXPECT_THROW(parse_ply("solid x\n", "stl.ply"), Error);
}

TEST_F(EvalFiles, PlotDrawsBothTrajectories) {
  if (!available()) GTEST_SKIP();
  std::vector<P3> ref, est;
  for (int i = 0; i < 50; ++i) {
    const double a = i * 0.12;
    ref.push_back({std::cos(a), 0.01 * i, std::sin(a)});
    est.push_back({1.1 * std::cos(a), 0.01 * i, 1.1 * std::sin(a)});
  }
  plot_trajectories(path("p.png"), ref, {est}, 320, 240);
  const ImageU8 img = load_image(path("p.png"));
  EXPECT_EQ(img.width, 320);
  EXPECT_EQ(img.height, 240);
  size_t blue = 0, grey = 0;
  for (size_t i = 0; i < img.rgb.size(); i += 3) {
    blue += img.rgb[i] == 31 && img.rgb[i + 1] == 119 && img.rgb[i + 2] == 180;
    grey += img.rgb[i] == 140 && img.rgb[i + 1] == 140 && img.rgb[i + 2] == 140;
  }
  EXPECT_GT(blue, 200u);
  EXPECT_GT(grey, 100u);
}

}  // namespace
}  // namespace lingbot::eval
