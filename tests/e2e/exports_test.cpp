// Exports end to end: the demo's files parsed back and checked against its predictions, the
// run command's naming, bad options, and runs that stop without finishing.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "io/image.h"
#include "io/sinks/sink.h"
#include "sinks_test_util.h"
#include "test_util.h"
#include "weights/safetensors.h"

namespace lingbot {
namespace {

namespace fs = std::filesystem;
using test::numbers;
using test::read_lines;

using Result = test::CliResult;
const auto cli = test::run_cli;

std::vector<std::string> data_lines(const std::string& path) {  // without # comments
  std::vector<std::string> out;
  for (auto& l : read_lines(path))
    if (l.empty() || l[0] != '#') out.push_back(l);
  return out;
}

class Exports : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = fs::temp_directory_path() / ("lingbot_exports_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }
  static std::string path(const std::string& name) { return (dir_ / name).string(); }

  static fs::path dir_;
};
fs::path Exports::dir_;

// One frame of predictions.safetensors as a FrameResult, for comparing with the exports.
FrameResult frame_of(const TensorMap& p, int64_t f) {
  FrameResult r;
  r.index = f;
  const Tensor& depth = p.at("depth");
  r.height = int(depth.dim(1));
  r.width = int(depth.dim(2));
  auto copy = [&](const char* key, auto& dst) {
    const Tensor t = p.at(key)[f];
    std::copy(t.f32(), t.f32() + dst.size(), dst.begin());
  };
  copy("pose_enc", r.pose_enc);
  copy("c2w", r.c2w);
  copy("w2c", r.w2c);
  copy("intrinsics", r.intrinsics);
  const int64_t n = int64_t(r.height) * r.width;
  r.depth.assign(depth.f32() + f * n, depth.f32() + (f + 1) * n);
  r.confidence.assign(p.at("depth_conf").f32() + f * n, p.at("depth_conf").f32() + (f + 1) * n);
  return r;
}

uint16_t quantised(float x, double scale) {
  const double v = double(x) * scale;
  return !(v > 0) ? 0 : v >= 65535 ? 65535 : uint16_t(std::lround(v));
}

TEST_F(Exports, DemoWritesEveryFormatAndEachAgreesWithThePredictions) {
  const std::string out = path("demo");
  Result r = cli("demo --frames 6 --quiet --out " + out);
  ASSERT_EQ(r.code, 0) << r.output;
  const TensorMap pred = read_safetensors(out + "/predictions.safetensors").tensors;
  ASSERT_EQ(pred.at("c2w").shape(), (Shape{6, 3, 4}));
  std::vector<FrameResult> frames;
  for (int f = 0; f < 6; ++f) frames.push_back(frame_of(pred, f));
  const int W = frames[0].width, H = frames[0].height;
  char buf[32];
  auto name = [&](int f) {
    std::snprintf(buf, sizeof buf, "%06d.png", f);
    return std::string(buf);
  };

  // Trajectories: c2w, TUM as translation + unit quaternion, KITTI as the 12 numbers.
  const auto tum = read_lines(out + "/trajectory_tum.txt");
  const auto kitti = read_lines(out + "/trajectory_kitti.txt");
  ASSERT_EQ(tum.size(), 6u);
  ASSERT_EQ(kitti.size(), 6u);
  for (int f = 0; f < 6; ++f) {
    const auto& m = frames[f].c2w;
    const auto t = numbers(tum[f]), k = numbers(kitti[f]);
    ASSERT_EQ(t.size(), 8u);
    ASSERT_EQ(k.size(), 12u);
    EXPECT_EQ(t[0], f);
    EXPECT_EQ(float(t[1]), m[3]);
    EXPECT_EQ(float(t[2]), m[7]);
    EXPECT_EQ(float(t[3]), m[11]);
    const auto R = test::quat_to_rot(t[4], t[5], t[6], t[7]);
    for (int i = 0; i < 3; ++i)
      for (int j = 0; j < 3; ++j) EXPECT_NEAR(R[i * 3 + j], m[i * 4 + j], 1e-5);
    for (int i = 0; i < 12; ++i) EXPECT_EQ(float(k[i]), m[i]);
  }

  // frames.jsonl: the cameras exactly as predicted.
  const auto json = read_lines(out + "/frames.jsonl");
  ASSERT_EQ(json.size(), 6u);
  for (int f = 0; f < 6; ++f) {
    const auto j = nlohmann::json::parse(json[f]);
    EXPECT_EQ(j["index"], f);
    EXPECT_EQ(j["image"], name(f));
    EXPECT_EQ(j["width"], W);
    EXPECT_EQ(j["height"], H);
    for (int i = 0; i < 9; ++i) EXPECT_EQ(j["pose_enc"][i].get<float>(), frames[f].pose_enc[i]);
    for (int i = 0; i < 12; ++i) EXPECT_EQ(j["w2c"][i].get<float>(), frames[f].w2c[i]);
    for (int i = 0; i < 9; ++i) EXPECT_EQ(j["intrinsics"][i].get<float>(), frames[f].intrinsics[i]);
  }

  // Depth and confidence PNGs: the predictions quantised with the recorded scales.
  const auto scales = nlohmann::json::parse(std::ifstream(out + "/depth_scale.json"));
  const double ds = scales["depth_scale"], cs = scales["confidence_scale"];
  for (int f = 0; f < 6; ++f) {
    const auto d = test::read_png16(out + "/depth/" + name(f));
    const auto c = test::read_png16(out + "/confidence/" + name(f));
    ASSERT_EQ(d.values.size(), frames[f].depth.size());
    ASSERT_EQ(c.values.size(), frames[f].confidence.size());
    for (size_t i = 0; i < d.values.size(); ++i) {
      ASSERT_EQ(d.values[i], quantised(frames[f].depth[i], ds)) << f << " " << i;
      ASSERT_EQ(c.values[i], quantised(frames[f].confidence[i], cs)) << f << " " << i;
    }
  }

  // The model input beside the cameras: the demo feeds its rendered frames as they are.
  for (int f = 0; f < 6; ++f) {
    const ImageU8 a = load_image(out + "/images/" + name(f));
    const ImageU8 b = load_image(out + "/frames/" + name(f));
    EXPECT_EQ(a.rgb, b.rgb) << f;
  }

  // points.ply: confident pixels on the stride-4 grid, unprojected, coloured from the frames.
  const auto cloud = test::read_ply(out + "/points.ply");
  ASSERT_TRUE(cloud.ok);
  EXPECT_EQ(cloud.extra_bytes, 0);
  size_t next = 0;
  for (int f = 0; f < 6; ++f) {
    const ImageU8 img = load_image(out + "/frames/" + name(f));
    for (const auto& e : test::expected_points(frames[f], 1.5f, 4)) {
      if (!std::isfinite(e.x) || !std::isfinite(e.y) || !std::isfinite(e.z)) continue;
      ASSERT_LT(next, cloud.vertices.size());
      const auto& v = cloud.vertices[next++];
      const double tol = 1e-5 * (1 + std::fabs(e.x) + std::fabs(e.y) + std::fabs(e.z));
      ASSERT_NEAR(v.x, e.x, tol);
      ASSERT_NEAR(v.y, e.y, tol);
      ASSERT_NEAR(v.z, e.z, tol);
      ASSERT_EQ(v.confidence, e.conf);
      const uint8_t* px = &img.rgb[(size_t(e.v) * W + e.u) * 3];
      ASSERT_EQ(v.r, px[0]);
      ASSERT_EQ(v.g, px[1]);
      ASSERT_EQ(v.b, px[2]);
    }
  }
  EXPECT_EQ(int64_t(next), cloud.count);
  EXPECT_GT(cloud.count, 0);

  // points.glb: the PLY's points as a valid glTF, and a camera per frame.
  const auto glb = test::read_glb(out + "/points.glb");
  ASSERT_TRUE(glb.ok()) << glb.error;
  EXPECT_EQ(glb.json["accessors"][0]["count"].get<int64_t>(), cloud.count);
  const auto xyz = glb.floats(0);
  ASSERT_EQ(xyz.size(), cloud.vertices.size() * 3);
  for (size_t i = 0; i < cloud.vertices.size(); ++i) {
    ASSERT_EQ(xyz[3 * i], cloud.vertices[i].x);
    ASSERT_EQ(xyz[3 * i + 2], cloud.vertices[i].z);
  }
  EXPECT_EQ(glb.json["accessors"][2]["count"], 6 * 5);

  // Float32 maps: the predictions exactly, and the PNGs within their quantisation.
  for (int f = 0; f < 6; ++f) {
    const std::string npy = name(f).substr(0, name(f).size() - 4) + ".npy";
    const auto d = test::read_npy(out + "/depth_f32/" + npy);
    const auto c = test::read_npy(out + "/confidence_f32/" + npy);
    ASSERT_TRUE(d.ok && c.ok) << npy;
    EXPECT_EQ(d.shape, "(" + std::to_string(H) + ", " + std::to_string(W) + ")");
    ASSERT_EQ(d.values, frames[f].depth);
    ASSERT_EQ(c.values, frames[f].confidence);
    const auto png = test::read_png16(out + "/depth/" + name(f));
    for (size_t i = 0; i < png.values.size(); ++i)
      if (d.values[i] > 0 && d.values[i] < 65535 / ds)
        ASSERT_NEAR(png.values[i] / ds, d.values[i], 0.5 / ds + 1e-6) << f << " " << i;
  }

  // COLMAP: a camera and an image (w2c) per frame, the same points as the PLY.
  const auto cams = data_lines(out + "/colmap/cameras.txt");
  const auto imgs = data_lines(out + "/colmap/images.txt");
  const auto pts = data_lines(out + "/colmap/points3D.txt");
  ASSERT_EQ(cams.size(), 6u);
  ASSERT_EQ(imgs.size(), 12u);
  EXPECT_EQ(int64_t(pts.size()), cloud.count);
  for (int f = 0; f < 6; ++f) {
    EXPECT_EQ(cams[f].rfind(std::to_string(f + 1) + " PINHOLE " + std::to_string(W) + " " +
                                std::to_string(H) + " ",
                            0),
              0u)
        << cams[f];
    std::istringstream s(imgs[2 * f]);
    int id, cam;
    double q[4], t[3];
    std::string file;
    s >> id >> q[0] >> q[1] >> q[2] >> q[3] >> t[0] >> t[1] >> t[2] >> cam >> file;
    EXPECT_EQ(file, name(f));
    EXPECT_TRUE(fs::exists(out + "/images/" + file));
    const auto R = test::quat_to_rot(q[1], q[2], q[3], q[0]);
    const auto& m = frames[f].w2c;
    for (int i = 0; i < 3; ++i) {
      for (int j = 0; j < 3; ++j) EXPECT_NEAR(R[i * 3 + j], m[i * 4 + j], 1e-5);
      EXPECT_EQ(float(t[i]), m[i * 4 + 3]);
    }
  }
  if (!pts.empty()) {
    const auto p = numbers(pts[0]);
    ASSERT_EQ(p.size(), 8u);
    EXPECT_EQ(float(p[1]), cloud.vertices[0].x);
    EXPECT_EQ(float(p[2]), cloud.vertices[0].y);
    EXPECT_EQ(float(p[3]), cloud.vertices[0].z);
    EXPECT_EQ(p[4], cloud.vertices[0].r);
  }

  // nerfstudio: every referenced file exists; the matrix is c2w with y and z flipped.
  const auto ns = nlohmann::json::parse(std::ifstream(out + "/transforms.json"));
  EXPECT_EQ(ns["camera_model"], "OPENCV");
  EXPECT_TRUE(fs::exists(out + "/" + ns["ply_file_path"].get<std::string>()));
  ASSERT_EQ(ns["frames"].size(), 6u);
  for (int f = 0; f < 6; ++f) {
    const auto& j = ns["frames"][f];
    EXPECT_TRUE(fs::exists(out + "/" + j["file_path"].get<std::string>()));
    EXPECT_TRUE(fs::exists(out + "/" + j["depth_file_path"].get<std::string>()));
    EXPECT_EQ(j["w"], W);
    EXPECT_EQ(j["h"], H);
    const auto& m = frames[f].c2w;
    for (int i = 0; i < 3; ++i) {
      EXPECT_EQ(j["transform_matrix"][i][0].get<float>(), m[i * 4]);
      EXPECT_EQ(j["transform_matrix"][i][1].get<float>(), -m[i * 4 + 1]);
      EXPECT_EQ(j["transform_matrix"][i][2].get<float>(), -m[i * 4 + 2]);
      EXPECT_EQ(j["transform_matrix"][i][3].get<float>(), m[i * 4 + 3]);
    }
  }
}

TEST_F(Exports, RunNamesExportsAfterItsInputsAndExportsNothingUnasked) {
  // The demo's pictures: the tiny synthetic model gives finite cameras on them (on the fixture's
  // frames its field of view is 0, and COLMAP and nerfstudio skip such frames).
  ASSERT_EQ(cli("demo --frames 16 --no-render --export none --quiet --out " + path("demo")).code, 0);
  const std::string frames = path("demo/frames");
  const std::string base = "run --model synthetic:1 --arch tiny --input " + frames +
                           " --preprocess none --scale-frames 4 --window 6 --quiet";
  Result r = cli(base + " --export tum,colmap,nerfstudio --point-stride 8 --out " + path("run"));
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(read_lines(path("run/trajectory_tum.txt")).size(), 16u);
  const auto imgs = data_lines(path("run/colmap/images.txt"));
  ASSERT_EQ(imgs.size(), 32u);
  EXPECT_NE(imgs[0].find(" 000000.png"), std::string::npos) << imgs[0];
  EXPECT_NE(imgs[30].find(" 000015.png"), std::string::npos) << imgs[30];
  EXPECT_TRUE(fs::exists(path("run/images/000015.png")));
  EXPECT_FALSE(fs::exists(path("run/points.ply")));
  EXPECT_FALSE(fs::exists(path("run/trajectory_kitti.txt")));
  const auto ns = nlohmann::json::parse(std::ifstream(path("run/transforms.json")));
  EXPECT_FALSE(ns.contains("ply_file_path"));
  EXPECT_FALSE(ns["frames"][0].contains("depth_file_path"));

  // Without --export, run writes what it always did.
  r = cli(base + " --out " + path("plain"));
  ASSERT_EQ(r.code, 0) << r.output;
  std::vector<std::string> names;
  for (auto& e : fs::directory_iterator(path("plain"))) names.push_back(e.path().filename());
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"predictions.safetensors", "run.json"}));
}

TEST_F(Exports, BadExportOptionsFailCleanly) {
  test::expect_clean_cli_failure("demo --frames 2 --export tum,obj --out " + path("bad"), "'obj'");
  std::ofstream(path("a_file")) << "x";
  test::expect_clean_cli_failure(
      "run --model synthetic:1 --arch tiny --input " + test::fixtures_dir() +
          "/tiny/frames --preprocess none --export ply --out " + path("a_file/out"),
      "a_file/out");
}

// A bad --out is refused with one line before anything runs, in both modes and with or
// without exports ("a path under a regular file" fails for root too, unlike permissions).
TEST_F(Exports, UnwritableOutputFolderFailsCleanlyBeforeRunning) {
  std::ofstream(path("plain_file")) << "x";
  const std::string base = "run --model synthetic:1 --arch tiny --input " + test::fixtures_dir() +
                           "/tiny/frames --preprocess none --scale-frames 4 --window 6 --quiet";
  for (const char* extra : {"", " --mode windowed --window-size 6 --overlap 2",
                            " --export glb,depth_f32", " --no-preflight"}) {
    SCOPED_TRACE(extra);
    test::expect_clean_cli_failure(base + extra + " --out " + path("plain_file/out"),
                                   "cannot create output folder " + path("plain_file/out"));
  }
}

// A process that dies after some frames, without finish() or destructors, leaves files that
// parse and hold exactly the frames it completed.
TEST_F(Exports, SinksKilledWithoutFinishLeaveValidFiles) {
  const std::string out = path("killed_sinks");
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ExportOptions o;
    o.out_dir = out;
    o.formats = parse_export_list("all");
    auto sinks = make_sinks(o);
    const Tensor rgb = test::make_rgb_u8(1);
    for (int f = 0; f < 3; ++f)
      for (auto& s : sinks) s->add(test::make_frame(f), &rgb);
    sinks.front().release();
    _exit(0);  // no finish(), no destructors, no stdio flush
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);

  int64_t points = 0;
  for (int f = 0; f < 3; ++f)
    points += int64_t(test::expected_points(test::make_frame(f), 1.5f, 4).size());
  const auto cloud = test::read_ply(out + "/points.ply");
  ASSERT_TRUE(cloud.ok);
  EXPECT_EQ(cloud.count, points);
  EXPECT_EQ(cloud.extra_bytes, 0);
  EXPECT_EQ(read_lines(out + "/trajectory_tum.txt").size(), 3u);
  EXPECT_EQ(read_lines(out + "/trajectory_kitti.txt").size(), 3u);
  EXPECT_EQ(read_lines(out + "/frames.jsonl").size(), 3u);
  EXPECT_EQ(data_lines(out + "/colmap/images.txt").size(), 6u);
  EXPECT_EQ(int64_t(data_lines(out + "/colmap/points3D.txt").size()), points);
  const auto ns = nlohmann::json::parse(std::ifstream(out + "/transforms.json"));
  EXPECT_EQ(ns["frames"].size(), 3u);
  EXPECT_TRUE(fs::exists(out + "/depth/frame_000002.png"));
  EXPECT_EQ(test::read_npy(out + "/depth_f32/frame_000002.npy").values, test::make_frame(2).depth);
  // Fewer frames than a GLB rewrite: the empty scene written at the start, still valid.
  const auto glb = test::read_glb(out + "/points.glb");
  EXPECT_TRUE(glb.ok()) << glb.error;
}

// The real thing: the demo killed mid-stream keeps valid exports of the frames it finished.
TEST_F(Exports, KilledDemoKeepsValidExports) {
  const std::string out = path("killed_demo");
  const std::string log = path("killed_demo.log");
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    FILE* f = std::freopen(log.c_str(), "w", stderr);
    (void)f;
    execl(LINGBOT_CLI, LINGBOT_CLI, "demo", "--frames", "100000", "--quiet", "--out", out.c_str(),
          static_cast<char*>(nullptr));
    _exit(127);
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::minutes(5);
  size_t done = 0;
  while (std::chrono::steady_clock::now() < deadline) {
    if (fs::exists(out + "/frames.jsonl")) done = read_lines(out + "/frames.jsonl").size();
    if (done >= 8 || waitpid(pid, nullptr, WNOHANG) == pid) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  kill(pid, SIGKILL);
  int status = 0;
  waitpid(pid, &status, 0);
  // What the demo said, for a failure's message (the folder goes with the test suite).
  const auto said = [&] {
    std::ifstream f(log);
    return std::string(std::istreambuf_iterator<char>(f), {});
  };
  ASSERT_GE(done, 8u) << "the demo did not get far enough (" << done
                      << " frames); it said: " << said();
  ASSERT_TRUE(WIFSIGNALED(status)) << "the demo ended by itself first; it said: " << said();
  EXPECT_FALSE(fs::exists(out + "/predictions.safetensors"));  // that one is written at the end

  const auto json = read_lines(out + "/frames.jsonl");
  for (const auto& l : json) EXPECT_TRUE(nlohmann::json::accept(l)) << l;
  for (const auto& l : read_lines(out + "/trajectory_tum.txt")) EXPECT_EQ(numbers(l).size(), 8u);
  const auto cloud = test::read_ply(out + "/points.ply");
  ASSERT_TRUE(cloud.ok);
  EXPECT_GT(cloud.count, 0);
  for (const auto& v : cloud.vertices) {
    ASSERT_TRUE(std::isfinite(v.x) && std::isfinite(v.y) && std::isfinite(v.z));
    ASSERT_GT(v.confidence, 1.5f);
  }
  const auto glb = test::read_glb(out + "/points.glb");
  EXPECT_TRUE(glb.ok()) << glb.error;
  const auto ns = nlohmann::json::parse(std::ifstream(out + "/transforms.json"));
  // nerfstudio adds a frame after every export before it (frames.jsonl, depth, images), so it
  // lists no frame, picture or depth map that is not written.
  EXPECT_LE(ns["frames"].size(), json.size());
  for (const auto& j : ns["frames"]) {
    EXPECT_TRUE(fs::exists(out + "/" + j["file_path"].get<std::string>())) << j;
    if (j.contains("depth_file_path"))
      EXPECT_TRUE(fs::exists(out + "/" + j["depth_file_path"].get<std::string>())) << j;
  }
  // COLMAP likewise: "IMAGE_ID QW QX QY QZ TX TY TZ CAMERA_ID NAME", then an empty line of 2D
  // points.
  for (const auto& l : data_lines(out + "/colmap/images.txt"))
    if (!l.empty()) EXPECT_TRUE(fs::exists(out + "/images/" + l.substr(l.rfind(' ') + 1))) << l;
}

}  // namespace
}  // namespace lingbot
