// Non-finite results (a diverging model, a bad checkpoint): the run counts them and warns once,
// and the exports whose formats cannot hold inf or NaN skip those frames or points and say how
// many, while every file they write stays readable.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "lingbot/run.h"
#include "test_util.h"
#include "tiny_frames.h"

namespace lingbot {
namespace {

namespace fs = std::filesystem;

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// The tiny model with finite pinhole intrinsics (its synthetic weights give a field of view of 0,
// hence infinite focal lengths, on these frames), then frame 5's focal length made infinite and
// frame 9's depth NaN on a quarter of its pixels, as a diverging model would give them.
class CorruptingEngine final : public Engine {
 public:
  explicit CorruptingEngine(bool corrupt = true)
      : inner_(Engine::create({.model = "synthetic:1", .arch = "tiny"})), corrupt_(corrupt) {}
  ModelInfo info() const override { return inner_->info(); }
  size_t device_memory_used() const override { return 0; }
  size_t device_memory_free() const override { return 0; }
  std::unique_ptr<Session> start(const StreamOptions& o) override {
    return std::make_unique<Corrupting>(inner_->start(o), corrupt_);
  }

 private:
  class Corrupting final : public Session {
   public:
    Corrupting(std::unique_ptr<Session> s, bool corrupt) : s_(std::move(s)), corrupt_(corrupt) {}
    void push(const Tensor& image, const Callback& cb) override { s_->push(image, wrap(cb)); }
    void finish(const Callback& cb) override { s_->finish(wrap(cb)); }
    void flush(const Callback& cb) override { s_->flush(wrap(cb)); }
    void reset() override { s_->reset(); }
    CacheStats cache_stats() const override { return s_->cache_stats(); }

   private:
    Callback wrap(const Callback& cb) const {
      return [cb, corrupt = corrupt_](const FrameResult& r) {
        FrameResult c = r;
        c.intrinsics = {60, 0, 35, 0, 60, 28, 0, 0, 1};
        if (corrupt && c.index == 5) c.intrinsics[0] = kInf;
        if (corrupt && c.index == 9)
          for (size_t i = 0; i < c.depth.size() / 4; ++i) c.depth[i] = kNaN;
        cb(c);
      };
    }
    std::unique_ptr<Session> s_;
    bool corrupt_;
  };
  std::unique_ptr<Engine> inner_;
  bool corrupt_;
};

class VectorSource final : public FrameSource {
 public:
  explicit VectorSource(std::vector<Tensor> f) : frames_(std::move(f)) {}
  std::optional<Tensor> get(int64_t i) override {
    if (i < 0 || i >= count()) return std::nullopt;
    return frames_[i];
  }
  int64_t count() const override { return static_cast<int64_t>(frames_.size()); }
  Times times() const override { return {}; }

 private:
  std::vector<Tensor> frames_;
};

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

class NonFinite : public test::TempDirTest {};

TEST_F(NonFinite, RunCountsWarnsOnceAndExportsSkipWhatTheyCannotHold) {
  if (!fs::is_directory(test::fixtures_dir() + "/tiny/frames")) GTEST_SKIP() << "no fixtures";
  CorruptingEngine engine;
  VectorSource source(test::tiny_frames());
  RunOptions o{.stream = {.scale_frames = 4, .window = 6}, .out_dir = path("out")};
  o.exports.formats = parse_export_list("colmap,nerfstudio,ply,glb,tum");
  o.exports.points.conf_threshold = 0;  // every pixel is a point: frame 9's NaN ones count
  o.exports.points.stride = 1;
  std::vector<std::string> warnings;
  o.warn = [&](const char* line) { warnings.emplace_back(line); };
  const RunReport r = run(engine, source, o);

  EXPECT_EQ(r.frames, 16);
  EXPECT_EQ(r.non_finite_frames, 2);
  EXPECT_EQ(r.first_non_finite, (std::vector<int64_t>{5, 9}));
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("frame 5"), std::string::npos) << warnings[0];

  // The depth map is 56x70 at stride 1: a quarter of it is 980 NaN pixels.
  // The point formats place frame 5's points (on the optical axis: its pose is finite); the
  // camera formats cannot hold its focal length.
  const std::vector<std::string> want = {
      "colmap: skipped 1 frame with non-finite cameras and 980 points with non-finite values",
      "nerfstudio: skipped 1 frame with non-finite cameras",
      "ply: skipped 980 points with non-finite values",
      "glb: skipped 980 points with non-finite values"};
  for (const std::string& note : want)
    EXPECT_NE(std::find(r.notes.begin(), r.notes.end(), note), r.notes.end())
        << note << "\nnotes: " << nlohmann::json(r.notes).dump();
  EXPECT_NE(describe(r).find("non-finite results in 2 frames (first: 5 9)"), std::string::npos)
      << describe(r);

  // COLMAP has 15 cameras and no "inf"; nerfstudio parses, with 15 frames and no null.
  const std::string cameras = slurp(path("out/colmap/cameras.txt"));
  EXPECT_EQ(cameras.find("inf"), std::string::npos);
  int camera_lines = 0;
  std::istringstream lines(cameras);
  for (std::string line; std::getline(lines, line);)
    camera_lines += !line.empty() && line[0] != '#';
  EXPECT_EQ(camera_lines, 15);
  const auto ns = nlohmann::json::parse(slurp(path("out/transforms.json")));
  EXPECT_EQ(ns["frames"].size(), 15u);
  EXPECT_EQ(ns.dump().find("null"), std::string::npos);
  // The TUM trajectory holds what the model said, every frame (it has no intrinsics).
  int tum = 0;
  std::istringstream t(slurp(path("out/trajectory_tum.txt")));
  for (std::string line; std::getline(t, line);) ++tum;
  EXPECT_EQ(tum, 16);
  // And the JSON report carries the counts for tools.
  const auto j = nlohmann::json::parse(to_json(r));
  EXPECT_EQ(j["non_finite_frames"].get<int64_t>(), 2);
  EXPECT_EQ(j["notes"].size(), 4u);
}

TEST_F(NonFinite, ACleanRunSaysNothing) {
  if (!fs::is_directory(test::fixtures_dir() + "/tiny/frames")) GTEST_SKIP() << "no fixtures";
  CorruptingEngine engine(/*corrupt=*/false);
  std::vector<Tensor> frames = test::tiny_frames();
  frames.resize(6);
  VectorSource source(frames);
  RunOptions o{.stream = {.scale_frames = 4, .window = 6}, .out_dir = path("out")};
  o.exports.formats = parse_export_list("colmap,ply");
  int warned = 0;
  o.warn = [&](const char*) { ++warned; };
  const RunReport r = run(engine, source, o);
  EXPECT_EQ(r.non_finite_frames, 0);
  EXPECT_TRUE(r.notes.empty());
  EXPECT_EQ(warned, 0);
  EXPECT_EQ(describe(r).find("non-finite"), std::string::npos);
}

}  // namespace
}  // namespace lingbot
