// The export sinks on synthetic frames: every file is parsed back by an independent reader and
// compared with the FrameResult it came from.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "io/sinks/sink.h"
#include "lingbot/error.h"
#include "sinks_test_util.h"
#include "test_util.h"

namespace lingbot {
namespace {

namespace fs = std::filesystem;
using test::numbers;
using test::read_lines;

using test::expected_points;
using test::kH;
using test::kW;
using test::make_frame;
using test::make_rgb_u8;

using Sinks = test::TempDirTest;

// Quaternions that take every branch of the matrix-to-quaternion conversion, including turns
// of 180 degrees about each axis.
const std::vector<std::array<float, 4>> kQuats = {{0.1f, -0.2f, 0.3f, 0.9f},
                                                  {1, 0, 0, 0},
                                                  {0, 1, 0, 0},
                                                  {0, 0, 1, 0},
                                                  {0.7f, 0.1f, 0.1f, 0.05f},
                                                  {0.1f, 0.8f, -0.2f, 0.1f},
                                                  {-0.2f, 0.1f, 0.9f, 0.02f}};

TEST_F(Sinks, TumQuaternionRoundTripsToC2w) {
  std::vector<FrameResult> frames;
  for (size_t i = 0; i < kQuats.size(); ++i) frames.push_back(make_frame(int64_t(i), kQuats[i]));
  auto sink = make_trajectory_sink(path("t.txt"), TrajectoryFormat::TUM);
  for (auto& f : frames) sink->add(f, nullptr);
  sink->finish();
  const auto lines = read_lines(path("t.txt"));
  ASSERT_EQ(lines.size(), frames.size());
  for (size_t i = 0; i < frames.size(); ++i) {
    const auto v = numbers(lines[i]);
    ASSERT_EQ(v.size(), 8u) << lines[i];
    EXPECT_EQ(v[0], double(i));  // timestamp = frame index
    const auto& m = frames[i].c2w;
    EXPECT_EQ(float(v[1]), m[3]);
    EXPECT_EQ(float(v[2]), m[7]);
    EXPECT_EQ(float(v[3]), m[11]);
    EXPECT_NEAR(v[4] * v[4] + v[5] * v[5] + v[6] * v[6] + v[7] * v[7], 1.0, 1e-6);
    EXPECT_GE(v[7], 0.0);
    const auto R = test::quat_to_rot(v[4], v[5], v[6], v[7]);
    for (int r = 0; r < 3; ++r)
      for (int c = 0; c < 3; ++c) EXPECT_NEAR(R[r * 3 + c], m[r * 4 + c], 2e-6) << i;
  }
}

TEST_F(Sinks, TumUsesGivenTimestamps) {
  auto sink = make_trajectory_sink(path("t.txt"), TrajectoryFormat::TUM,
                                   [](int64_t i) { return 1700000000.5 + i / 30.0; });
  sink->add(make_frame(0), nullptr);
  sink->add(make_frame(3), nullptr);
  const auto lines = read_lines(path("t.txt"));  // readable before finish()
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_DOUBLE_EQ(numbers(lines[0])[0], 1700000000.5);
  EXPECT_DOUBLE_EQ(numbers(lines[1])[0], 1700000000.5 + 0.1);
  sink->finish();
}

TEST_F(Sinks, KittiIsC2wRowMajor) {
  auto sink = make_trajectory_sink(path("k.txt"), TrajectoryFormat::KITTI);
  const FrameResult a = make_frame(0), b = make_frame(1, kQuats[2]);
  sink->add(a, nullptr);
  sink->add(b, nullptr);
  sink->finish();
  const auto lines = read_lines(path("k.txt"));
  ASSERT_EQ(lines.size(), 2u);
  for (int f = 0; f < 2; ++f) {
    const auto v = numbers(lines[f]);
    ASSERT_EQ(v.size(), 12u);
    for (int i = 0; i < 12; ++i) EXPECT_EQ(float(v[i]), (f ? b : a).c2w[i]);  // exact round trip
  }
}

TEST_F(Sinks, FramesJsonLinesHoldEveryCameraField) {
  auto sink = make_frames_json_sink(path("f.jsonl"),
                                    [](int64_t i) { return "img" + std::to_string(i) + ".png"; });
  std::vector<FrameResult> frames = {make_frame(0), make_frame(1, kQuats[4]), make_frame(2)};
  for (auto& f : frames) sink->add(f, nullptr);
  sink->finish();
  const auto lines = read_lines(path("f.jsonl"));
  ASSERT_EQ(lines.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    const auto j = nlohmann::json::parse(lines[i]);
    const FrameResult& r = frames[i];
    EXPECT_EQ(j["index"], r.index);
    EXPECT_EQ(j["keyframe"], r.keyframe);
    EXPECT_EQ(j["image"], "img" + std::to_string(i) + ".png");
    EXPECT_EQ(j["width"], kW);
    EXPECT_EQ(j["height"], kH);
    auto same = [](const nlohmann::json& a, const auto& want) {
      ASSERT_EQ(a.size(), want.size());
      for (size_t k = 0; k < want.size(); ++k) EXPECT_EQ(a[k].get<float>(), want[k]) << k;
    };
    same(j["pose_enc"], r.pose_enc);
    same(j["c2w"], r.c2w);
    same(j["w2c"], r.w2c);
    same(j["intrinsics"], r.intrinsics);
  }
}

TEST_F(Sinks, DepthPngRoundTripsWithinTheScaleResolution) {
  DepthPngOptions o;
  o.depth_scale = 1000;
  o.confidence_scale = 100;
  auto sink = make_depth_png_sink(dir_.string(), o);
  FrameResult a = make_frame(0), b = make_frame(1);
  a.depth[0] = NAN;
  a.depth[1] = -2;
  a.depth[2] = 70;  // beyond 65.535: clamps
  a.depth[3] = 0.0004f;
  a.depth[4] = 0.0006f;
  a.confidence[5] = 1000;
  sink->add(a, nullptr);
  sink->add(b, nullptr);
  sink->finish();

  const auto scale = nlohmann::json::parse(std::ifstream(path("depth_scale.json")));
  EXPECT_EQ(scale["depth_scale"], 1000.0);
  EXPECT_EQ(scale["confidence_scale"], 100.0);
  for (const FrameResult* r : {&a, &b}) {
    const std::string name = default_frame_name(r->index);
    const auto d = test::read_png16(path("depth/" + name));
    const auto c = test::read_png16(path("confidence/" + name));
    ASSERT_EQ(d.bit_depth, 16);
    ASSERT_EQ(d.color_type, PNG_COLOR_TYPE_GRAY);
    ASSERT_EQ(d.width, kW);
    ASSERT_EQ(d.height, kH);
    ASSERT_EQ(d.values.size(), r->depth.size());
    ASSERT_EQ(c.values.size(), r->confidence.size());
    for (size_t i = 0; i < d.values.size(); ++i) {
      if (r == &a && i < 3) continue;
      EXPECT_NEAR(d.values[i] / 1000.0, r->depth[i], 0.5 / 1000 + 1e-7) << i;
      if (!(r == &a && i == 5))
        EXPECT_NEAR(c.values[i] / 100.0, r->confidence[i], 0.5 / 100 + 1e-6);
    }
    if (r == &a) {
      EXPECT_EQ(d.values[0], 0);  // NaN
      EXPECT_EQ(d.values[1], 0);  // negative
      EXPECT_EQ(d.values[2], 65535);
      EXPECT_EQ(d.values[3], 0);
      EXPECT_EQ(d.values[4], 1);
      EXPECT_EQ(c.values[5], 65535);
    }
  }
}

TEST_F(Sinks, PlyHeaderCountAndAKnownPoint) {
  PointOptions o;  // defaults: confidence > 1.5, stride 4
  auto sink = make_ply_sink(path("p.ply"), o);
  const FrameResult a = make_frame(0), b = make_frame(1, kQuats[5]);
  const Tensor ca = make_rgb_u8(0), cb = make_rgb_u8(1);
  sink->add(a, &ca);
  sink->add(b, &cb);
  sink->finish();

  auto want = expected_points(a, 1.5f, 4);
  const auto wb = expected_points(b, 1.5f, 4);
  ASSERT_FALSE(want.empty());
  ASSERT_FALSE(wb.empty());
  const size_t na = want.size();
  want.insert(want.end(), wb.begin(), wb.end());
  const auto cloud = test::read_ply(path("p.ply"));
  ASSERT_TRUE(cloud.ok);
  EXPECT_EQ(cloud.count, int64_t(want.size()));
  EXPECT_EQ(cloud.extra_bytes, 0);  // finish() leaves the file exact
  ASSERT_EQ(cloud.vertices.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    const auto& v = cloud.vertices[i];
    const auto& e = want[i];
    EXPECT_NEAR(v.x, e.x, 1e-5);
    EXPECT_NEAR(v.y, e.y, 1e-5);
    EXPECT_NEAR(v.z, e.z, 1e-5);
    EXPECT_EQ(v.confidence, e.conf);
    EXPECT_GT(v.confidence, 1.5f);
    EXPECT_EQ(e.u % 4, 0);
    EXPECT_EQ(e.v % 4, 0);
    const Tensor& rgb = i < na ? ca : cb;
    const size_t px = size_t(e.v) * kW + e.u, plane = size_t(kW) * kH;
    EXPECT_EQ(v.r, rgb.data<uint8_t>()[px]);
    EXPECT_EQ(v.g, rgb.data<uint8_t>()[plane + px]);
    EXPECT_EQ(v.b, rgb.data<uint8_t>()[2 * plane + px]);
  }
  // One point worked by hand. With stride 1 and threshold 2.4 only the pixels of confidence 2.5
  // remain; take the first of them.
  auto one = make_ply_sink(path("one.ply"), {.conf_threshold = 2.4f, .stride = 1});
  one->add(a, nullptr);
  one->finish();
  const auto c1 = test::read_ply(path("one.ply"));
  ASSERT_TRUE(c1.ok);
  const int64_t top = std::count(a.confidence.begin(), a.confidence.end(), 2.5f);
  EXPECT_EQ(c1.count, top);
  const size_t first =
      std::find(a.confidence.begin(), a.confidence.end(), 2.5f) - a.confidence.begin();
  const int pu = int(first % kW), pv = int(first / kW);
  const auto& k = a.intrinsics;
  const double d = a.depth[first];
  const double xc = (pu - k[2]) * d / k[0], yc = (pv - k[5]) * d / k[4], zc = d;
  const double x = a.c2w[0] * xc + a.c2w[1] * yc + a.c2w[2] * zc + a.c2w[3];
  const double y = a.c2w[4] * xc + a.c2w[5] * yc + a.c2w[6] * zc + a.c2w[7];
  const double z = a.c2w[8] * xc + a.c2w[9] * yc + a.c2w[10] * zc + a.c2w[11];
  ASSERT_FALSE(c1.vertices.empty());
  const auto& v = c1.vertices[0];  // points follow the pixels in row-major order
  EXPECT_NEAR(v.x, x, 1e-5);
  EXPECT_NEAR(v.y, y, 1e-5);
  EXPECT_NEAR(v.z, z, 1e-5);
  EXPECT_EQ(v.confidence, 2.5f);
  EXPECT_EQ(v.r, 128);  // grey without a frame
}

TEST_F(Sinks, PlySkipsNonFinitePointsAndTakesFloatColours) {
  FrameResult a = make_frame(0);
  Tensor rgb = Tensor::zeros({3, kH, kW});
  for (int64_t i = 0; i < rgb.numel(); ++i) rgb.f32()[i] = float(i % 256) / 255.0f;
  const auto want = expected_points(a, 1.5f, 1);
  ASSERT_GT(want.size(), 2u);
  const size_t bad = size_t(want[0].v) * kW + want[0].u;
  a.depth[bad] = INFINITY;
  auto sink = make_ply_sink(path("p.ply"), {.conf_threshold = 1.5f, .stride = 1});
  sink->add(a, &rgb);
  sink->finish();
  const auto cloud = test::read_ply(path("p.ply"));
  ASSERT_TRUE(cloud.ok);
  ASSERT_EQ(cloud.count, int64_t(want.size()) - 1);
  const size_t px = size_t(want[1].v) * kW + want[1].u, plane = size_t(kW) * kH;
  EXPECT_EQ(cloud.vertices[0].r, px % 256);
  EXPECT_EQ(cloud.vertices[0].g, (plane + px) % 256);
  EXPECT_EQ(cloud.vertices[0].b, (2 * plane + px) % 256);
}

TEST_F(Sinks, PlyIsValidAfterEveryFrameWithoutFinish) {
  auto sink = make_ply_sink(path("p.ply"), {});
  int64_t total = 0;
  for (int f = 0; f < 3; ++f) {
    const FrameResult r = make_frame(f);
    sink->add(r, nullptr);
    total += int64_t(expected_points(r, 1.5f, 4).size());
    const auto cloud = test::read_ply(path("p.ply"));
    ASSERT_TRUE(cloud.ok) << f;
    EXPECT_EQ(cloud.count, total);
    EXPECT_EQ(cloud.extra_bytes, 0);
  }
}

TEST_F(Sinks, ColmapImagesAreWorldToCameraAndPointsProjectOntoTheirPixels) {
  auto name = [](int64_t i) { return "in_" + std::to_string(i) + ".png"; };
  auto sink = make_colmap_sink(path("colmap"), {.conf_threshold = 1.5f, .stride = 2}, name);
  std::vector<FrameResult> frames = {make_frame(0), make_frame(1, kQuats[1]),
                                     make_frame(2, kQuats[6])};
  const Tensor rgb = make_rgb_u8(5);
  for (auto& f : frames) sink->add(f, &rgb);
  sink->finish();

  // cameras.txt: CAMERA_ID PINHOLE W H fx fy cx cy, principal point in COLMAP's pixel-centre
  // convention (+0.5).
  std::vector<std::string> cams;
  for (auto& l : read_lines(path("colmap/cameras.txt")))
    if (!l.empty() && l[0] != '#') cams.push_back(l);
  ASSERT_EQ(cams.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    std::istringstream s(cams[i]);
    std::string model;
    int id, w, h;
    double fx, fy, cx, cy;
    s >> id >> model >> w >> h >> fx >> fy >> cx >> cy;
    EXPECT_EQ(id, int(i) + 1);
    EXPECT_EQ(model, "PINHOLE");
    EXPECT_EQ(w, kW);
    EXPECT_EQ(h, kH);
    EXPECT_EQ(float(fx), frames[i].intrinsics[0]);
    EXPECT_EQ(float(fy), frames[i].intrinsics[4]);
    EXPECT_EQ(float(cx), frames[i].intrinsics[2] + 0.5f);
    EXPECT_EQ(float(cy), frames[i].intrinsics[5] + 0.5f);
  }

  // images.txt: two lines per image, the pose world-to-camera as qw qx qy qz tx ty tz.
  std::vector<std::string> imgs;
  for (auto& l : read_lines(path("colmap/images.txt")))
    if (l.empty() || l[0] != '#') imgs.push_back(l);
  ASSERT_EQ(imgs.size(), 6u);
  std::vector<std::array<double, 12>> w2c;
  for (size_t i = 0; i < 3; ++i) {
    std::istringstream s(imgs[2 * i]);
    int id, cam;
    double qw, qx, qy, qz, tx, ty, tz;
    std::string file;
    s >> id >> qw >> qx >> qy >> qz >> tx >> ty >> tz >> cam >> file;
    EXPECT_EQ(id, int(i) + 1);
    EXPECT_EQ(cam, int(i) + 1);
    EXPECT_EQ(file, name(int64_t(i)));
    EXPECT_TRUE(imgs[2 * i + 1].empty());
    EXPECT_NEAR(qw * qw + qx * qx + qy * qy + qz * qz, 1.0, 1e-9);
    const auto R = test::quat_to_rot(qx, qy, qz, qw);
    const auto& m = frames[i].w2c;
    for (int r = 0; r < 3; ++r)
      for (int c = 0; c < 3; ++c) EXPECT_NEAR(R[r * 3 + c], m[r * 4 + c], 2e-6);
    EXPECT_EQ(float(tx), m[3]);
    EXPECT_EQ(float(ty), m[7]);
    EXPECT_EQ(float(tz), m[11]);
    // And it really is world-to-camera: the camera centre (c2w translation) maps to 0.
    const auto& c = frames[i].c2w;
    for (int r = 0; r < 3; ++r)
      EXPECT_NEAR(R[r * 3] * c[3] + R[r * 3 + 1] * c[7] + R[r * 3 + 2] * c[11] +
                      (r == 0   ? tx
                       : r == 1 ? ty
                                : tz),
                  0, 1e-5);
    w2c.push_back({R[0], R[1], R[2], tx, R[3], R[4], R[5], ty, R[6], R[7], R[8], tz});
  }

  // points3D.txt: the same points as the PLY would hold; each projects, through its frame's
  // COLMAP camera, onto the centre of the pixel it came from.
  std::vector<std::vector<double>> pts;
  for (auto& l : read_lines(path("colmap/points3D.txt")))
    if (!l.empty() && l[0] != '#') pts.push_back(numbers(l));
  size_t next = 0;
  for (size_t f = 0; f < 3; ++f) {
    const auto want = expected_points(frames[f], 1.5f, 2);
    const auto& k = frames[f].intrinsics;
    for (const auto& e : want) {
      ASSERT_LT(next, pts.size());
      const auto& p = pts[next++];
      ASSERT_EQ(p.size(), 8u);  // id x y z r g b error, empty track
      EXPECT_EQ(p[0], double(next));
      const auto& m = w2c[f];
      double cam[3];
      for (int r = 0; r < 3; ++r)
        cam[r] = m[r * 4] * p[1] + m[r * 4 + 1] * p[2] + m[r * 4 + 2] * p[3] + m[r * 4 + 3];
      EXPECT_NEAR(k[0] * cam[0] / cam[2] + k[2] + 0.5, e.u + 0.5, 1e-3);
      EXPECT_NEAR(k[4] * cam[1] / cam[2] + k[5] + 0.5, e.v + 0.5, 1e-3);
      EXPECT_EQ(p[4], rgb.data<uint8_t>()[size_t(e.v) * kW + e.u]);
    }
  }
  EXPECT_EQ(next, pts.size());
}

TEST_F(Sinks, NerfstudioTransformsUseTheOpenGlCameraConvention) {
  NerfstudioOptions o;
  o.depth_dir = "depth";
  o.ply_file = "points.ply";
  auto sink = make_nerfstudio_sink(path("transforms.json"), o);
  std::vector<FrameResult> frames = {make_frame(0), make_frame(1, kQuats[3]), make_frame(2)};
  for (size_t n = 0; n < frames.size(); ++n) {
    sink->add(frames[n], nullptr);
    // Valid JSON after every frame, before finish().
    const auto j = nlohmann::json::parse(std::ifstream(path("transforms.json")));
    EXPECT_EQ(j["camera_model"], "OPENCV");
    EXPECT_EQ(j["ply_file_path"], "points.ply");
    ASSERT_EQ(j["frames"].size(), n + 1);
  }
  sink->finish();
  const auto j = nlohmann::json::parse(std::ifstream(path("transforms.json")));
  for (size_t i = 0; i < frames.size(); ++i) {
    const auto& f = j["frames"][i];
    const FrameResult& r = frames[i];
    EXPECT_EQ(f["file_path"], "images/" + default_frame_name(int64_t(i)));
    EXPECT_EQ(f["depth_file_path"], "depth/" + default_frame_name(int64_t(i)));
    EXPECT_EQ(f["w"], kW);
    EXPECT_EQ(f["h"], kH);
    EXPECT_EQ(f["fl_x"].get<float>(), r.intrinsics[0]);
    EXPECT_EQ(f["fl_y"].get<float>(), r.intrinsics[4]);
    EXPECT_EQ(f["cx"].get<float>(), r.intrinsics[2] + 0.5f);
    EXPECT_EQ(f["cy"].get<float>(), r.intrinsics[5] + 0.5f);
    const auto& t = f["transform_matrix"];
    ASSERT_EQ(t.size(), 4u);
    for (int row = 0; row < 3; ++row) {
      // x kept, y and z negated: OpenCV (y down, z forward) to OpenGL (y up, looking down -z).
      EXPECT_EQ(t[row][0].get<float>(), r.c2w[row * 4]);
      EXPECT_EQ(t[row][1].get<float>(), -r.c2w[row * 4 + 1]);
      EXPECT_EQ(t[row][2].get<float>(), -r.c2w[row * 4 + 2]);
      EXPECT_EQ(t[row][3].get<float>(), r.c2w[row * 4 + 3]);
    }
    EXPECT_EQ(t[3], nlohmann::json({0, 0, 0, 1}));
  }
}

// The GLB's points are the PLY's, vertex for vertex; each camera is a 5-vertex, 8-line frustum.
TEST_F(Sinks, GlbHoldsThePlyPointsAndAFrustumPerCamera) {
  const PointOptions o{.conf_threshold = 1.5f, .stride = 2};
  auto glb = make_glb_sink(path("p.glb"), o);
  auto ply = make_ply_sink(path("p.ply"), o);
  std::vector<FrameResult> frames = {make_frame(0), make_frame(1, kQuats[2]), make_frame(2)};
  const Tensor rgb = make_rgb_u8(3);
  for (auto& f : frames) {
    glb->add(f, &rgb);
    ply->add(f, &rgb);
  }
  glb->finish();
  ply->finish();
  const auto cloud = test::read_ply(path("p.ply"));
  const auto g = test::read_glb(path("p.glb"));
  ASSERT_TRUE(cloud.ok);
  ASSERT_TRUE(g.ok()) << g.error;
  const auto& j = g.json;
  ASSERT_EQ(j["meshes"].size(), 2u);
  const auto& points = j["meshes"][0]["primitives"][0];
  EXPECT_EQ(points["mode"], 0);
  const int pos = points["attributes"]["POSITION"], col = points["attributes"]["COLOR_0"];
  ASSERT_EQ(j["accessors"][pos]["count"].get<int64_t>(), cloud.count);
  const auto xyz = g.floats(pos), rgba = g.floats(col);
  ASSERT_EQ(xyz.size(), cloud.vertices.size() * 3);
  ASSERT_EQ(rgba.size(), cloud.vertices.size() * 4);
  std::array<float, 3> lo = {INFINITY, INFINITY, INFINITY}, hi = {-INFINITY, -INFINITY, -INFINITY};
  for (size_t i = 0; i < cloud.vertices.size(); ++i) {
    const auto& v = cloud.vertices[i];
    ASSERT_EQ(xyz[3 * i], v.x);
    ASSERT_EQ(xyz[3 * i + 1], v.y);
    ASSERT_EQ(xyz[3 * i + 2], v.z);
    ASSERT_EQ(rgba[4 * i], v.r / 255.0f);
    ASSERT_EQ(rgba[4 * i + 1], v.g / 255.0f);
    ASSERT_EQ(rgba[4 * i + 2], v.b / 255.0f);
    ASSERT_EQ(rgba[4 * i + 3], 1.0f);
    for (int k = 0; k < 3; ++k) {
      lo[k] = std::min(lo[k], xyz[3 * i + k]);
      hi[k] = std::max(hi[k], xyz[3 * i + k]);
    }
  }
  for (int k = 0; k < 3; ++k) {
    EXPECT_EQ(j["accessors"][pos]["min"][k].get<float>(), lo[k]);
    EXPECT_EQ(j["accessors"][pos]["max"][k].get<float>(), hi[k]);
  }

  const auto& cams = j["meshes"][1]["primitives"][0];
  EXPECT_EQ(cams["mode"], 1);
  const auto corners = g.floats(cams["attributes"]["POSITION"]);
  const auto lines = g.floats(cams["indices"]);
  ASSERT_EQ(corners.size(), frames.size() * 5 * 3);
  ASSERT_EQ(lines.size(), frames.size() * 16);
  for (size_t f = 0; f < frames.size(); ++f) {
    const auto& m = frames[f].c2w;
    const float* apex = &corners[f * 15];
    EXPECT_EQ(apex[0], m[3]);
    EXPECT_EQ(apex[1], m[7]);
    EXPECT_EQ(apex[2], m[11]);
    // The base lies in front of the camera, on the rays through the image corners.
    double depth = 0;
    for (int c = 1; c <= 4; ++c) {
      double cam[3];
      for (int r = 0; r < 3; ++r)
        cam[r] = frames[f].w2c[r * 4] * apex[3 * c] + frames[f].w2c[r * 4 + 1] * apex[3 * c + 1] +
                 frames[f].w2c[r * 4 + 2] * apex[3 * c + 2] + frames[f].w2c[r * 4 + 3];
      EXPECT_GT(cam[2], 0);
      if (c == 1) depth = cam[2];
      EXPECT_NEAR(cam[2], depth, 1e-4);
      const auto& k = frames[f].intrinsics;
      const double u = k[0] * cam[0] / cam[2] + k[2], v = k[4] * cam[1] / cam[2] + k[5];
      EXPECT_NEAR(u, c == 1 || c == 4 ? -0.5 : kW - 0.5, 1e-3);
      EXPECT_NEAR(v, c <= 2 ? -0.5 : kH - 0.5, 1e-3);
    }
    for (size_t i = 0; i < 16; ++i) {
      EXPECT_GE(lines[f * 16 + i], float(f * 5));
      EXPECT_LT(lines[f * 16 + i], float(f * 5 + 5));
    }
  }
  // OpenCV world axes under a root node that turns them to glTF's y-up.
  EXPECT_EQ(j["nodes"][0]["rotation"], nlohmann::json({1.0, 0.0, 0.0, 0.0}));
  EXPECT_EQ(j["nodes"][0]["children"].size(), 2u);
}

TEST_F(Sinks, GlbIsValidWhenEmptyAndAfterEachRewriteWithoutFinish) {
  auto sink = make_glb_sink(path("p.glb"), {});
  auto empty = test::read_glb(path("p.glb"));  // written at once
  ASSERT_TRUE(empty.ok()) << empty.error;
  EXPECT_FALSE(empty.json.contains("meshes"));
  EXPECT_TRUE(empty.bin.empty());
  int64_t points = 0;
  for (int f = 0; f < 17; ++f) {
    const FrameResult r = make_frame(f);
    sink->add(r, nullptr);
    if (f < 16) points += int64_t(expected_points(r, 1.5f, 4).size());
  }
  // Rewritten after frame 16, not yet after 17.
  const auto g = test::read_glb(path("p.glb"));
  ASSERT_TRUE(g.ok()) << g.error;
  EXPECT_EQ(g.json["accessors"][0]["count"], points);
  EXPECT_EQ(g.json["asset"]["extras"]["frames"], 16);
  EXPECT_FALSE(fs::exists(path("p.glb.tmp")));
  sink->finish();
  EXPECT_EQ(test::read_glb(path("p.glb")).json["asset"]["extras"]["frames"], 17);
}

TEST_F(Sinks, GlbDrawsEveryKthCameraBeyond512) {
  auto sink = make_glb_sink(path("p.glb"), {});
  for (int f = 0; f < 600; ++f) sink->add(make_frame(f), nullptr);
  sink->finish();
  const auto g = test::read_glb(path("p.glb"));
  ASSERT_TRUE(g.ok()) << g.error;
  const int corners = g.json["meshes"][1]["primitives"][0]["attributes"]["POSITION"];
  EXPECT_EQ(g.json["accessors"][corners]["count"], 300 * 5);  // frames 0, 2, ..., 598
  const auto xyz = g.floats(corners);
  EXPECT_EQ(xyz[5 * 3 * 299], make_frame(598).c2w[3]);
}

TEST_F(Sinks, DepthNpyHoldsTheFloatMapsExactly) {
  auto sink = make_depth_npy_sink(dir_.string(),
                                  [](int64_t i) { return "in" + std::to_string(i) + ".png"; });
  FrameResult a = make_frame(0), b = make_frame(1);
  a.depth[0] = NAN;
  a.depth[1] = -2;
  a.depth[2] = 1e6f;
  a.confidence[3] = 12345.678f;
  sink->add(a, nullptr);
  sink->add(b, nullptr);
  sink->finish();
  for (const FrameResult* r : {&a, &b}) {
    const std::string name = "in" + std::to_string(r->index) + ".npy";
    for (const auto& [folder, want] :
         {std::pair{"depth_f32/", &r->depth}, std::pair{"confidence_f32/", &r->confidence}}) {
      const auto n = test::read_npy(path(folder + name));
      ASSERT_TRUE(n.ok) << folder << name;
      EXPECT_EQ(n.descr, "'<f4'");
      EXPECT_FALSE(n.fortran_order);
      EXPECT_EQ(n.shape, "(" + std::to_string(kH) + ", " + std::to_string(kW) + ")");
      EXPECT_EQ(n.data_offset % 64, 0u);
      ASSERT_EQ(n.values.size(), want->size());
      for (size_t i = 0; i < want->size(); ++i) {
        if (std::isnan((*want)[i]))
          EXPECT_TRUE(std::isnan(n.values[i]));
        else
          ASSERT_EQ(n.values[i], (*want)[i]) << i;
      }
    }
  }
  EXPECT_FALSE(fs::exists(path("depth_f32/in1.npy.tmp")));
}

TEST_F(Sinks, UnwritableOutputFolderThrowsError) {
  std::ofstream(path("file")) << "x";  // a file where a folder should be: fails even as root
  const std::string bad = path("file/sub");
  EXPECT_THROW(make_trajectory_sink(bad + "/t.txt", TrajectoryFormat::TUM), Error);
  EXPECT_THROW(make_frames_json_sink(bad + "/f.jsonl"), Error);
  EXPECT_THROW(make_depth_png_sink(bad), Error);
  EXPECT_THROW(make_ply_sink(bad + "/p.ply"), Error);
  EXPECT_THROW(make_glb_sink(bad + "/p.glb"), Error);
  EXPECT_THROW(make_depth_npy_sink(bad), Error);
  EXPECT_THROW(make_image_sink(bad), Error);
  EXPECT_THROW(make_colmap_sink(bad), Error);
  EXPECT_THROW(make_nerfstudio_sink(bad + "/transforms.json"), Error);
  ExportOptions o;
  o.out_dir = bad;
  o.formats = parse_export_list("all");
  try {
    make_sinks(o);
    FAIL() << "no Error";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find(bad), std::string::npos) << what;
    EXPECT_EQ(what.find('\n'), std::string::npos) << what;
  }
}

TEST_F(Sinks, ExportListsAndTheLayoutOfMakeSinks) {
  EXPECT_EQ(parse_export_list("all").size(), 10u);
  EXPECT_TRUE(parse_export_list("none").empty());
  EXPECT_TRUE(parse_export_list("").empty());
  EXPECT_EQ(parse_export_list("ply,tum,ply"), (std::vector<std::string>{"ply", "tum"}));
  try {
    parse_export_list("tum,obj");
    FAIL() << "no Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'obj'"), std::string::npos);
  }

  ExportOptions o;
  o.out_dir = path("out");
  o.formats = parse_export_list("all");
  auto sinks = make_sinks(o);
  EXPECT_EQ(sinks.size(), 10u);  // one per format (images also serves colmap and nerfstudio)
  // The exports that name other exports' files (COLMAP and nerfstudio list images/ and depth/)
  // say so, and come after those: a runner on separate threads orders each frame by that.
  std::vector<std::string> order;
  for (const auto& s : sinks) {
    order.push_back(s->name());
    const bool names_files = s->name() == "colmap" || s->name() == "nerfstudio";
    EXPECT_EQ(s->refers_to_earlier(), names_files) << s->name();
    if (names_files)
      for (const char* earlier : {"images", "depth"})
        EXPECT_NE(std::find(order.begin(), order.end(), earlier), order.end())
            << s->name() << " before " << earlier;
  }
  const Tensor rgb = make_rgb_u8(2);
  for (int f = 0; f < 2; ++f)
    for (auto& s : sinks) s->add(make_frame(f), &rgb);
  for (auto& s : sinks) s->finish();
  // Alone, images writes the model input.
  ExportOptions only = o;
  only.out_dir = path("only");
  only.formats = parse_export_list("images");
  auto image_sinks = make_sinks(only);
  ASSERT_EQ(image_sinks.size(), 1u);
  image_sinks[0]->add(make_frame(0), &rgb);
  EXPECT_TRUE(fs::is_regular_file(path("only/images/frame_000000.png")));
  for (const char* p :
       {"trajectory_tum.txt", "trajectory_kitti.txt", "frames.jsonl", "depth/frame_000001.png",
        "confidence/frame_000001.png", "depth_scale.json", "points.ply", "images/frame_000001.png",
        "colmap/cameras.txt", "colmap/images.txt", "colmap/points3D.txt", "transforms.json",
        "points.glb", "depth_f32/frame_000001.npy", "confidence_f32/frame_000001.npy"})
    EXPECT_TRUE(fs::is_regular_file(path("out/") + p)) << p;
}

}  // namespace
}  // namespace lingbot
