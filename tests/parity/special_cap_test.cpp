// max_special_frames on the tiny fixture (scale 4, window 6, every frame a keyframe): frames
// 10..15 evict frames 4..9, so a cap of 2 first drops specials when frame 12 attends. Up to
// there the run is the reference's; after it, it departs from it by the amount docs/ARCHITECTURE.md
// quotes (printed here), and stays finite.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "io/image.h"
#include "io/preprocess.h"
#include "lingbot/engine.h"
#include "test_util.h"
#include "weights/safetensors.h"

namespace lingbot {
namespace {

constexpr int kCapped = 12;  // the first frame that attends to a capped stream

std::vector<FrameResult> run_tiny(int64_t cap) {
  auto engine = Engine::create({.model = "synthetic:1", .arch = "tiny"});
  auto session = engine->start({.scale_frames = 4, .window = 6, .max_special_frames = cap});
  std::vector<FrameResult> out;
  auto collect = [&](const FrameResult& r) { out.push_back(r); };
  for (const auto& path : list_images(test::fixtures_dir() + "/tiny/frames"))
    session->push(to_float01(preprocess(load_image(path), PreprocessMode::None)), collect);
  session->finish(collect);
  const CacheStats s = session->cache_stats();
  EXPECT_EQ(s.special_frames, cap ? std::min<int64_t>(cap, 6) : 6);
  return out;
}

// Relative difference (max abs error / max abs reference) of frames [begin, end).
struct Diff {
  double pose, depth;
};
Diff compare(const std::vector<FrameResult>& got, const TensorMap& want, int begin, int end) {
  std::vector<float> pose, depth;
  for (int i = begin; i < end; ++i) {
    pose.insert(pose.end(), got[i].pose_enc.begin(), got[i].pose_enc.end());
    depth.insert(depth.end(), got[i].depth.begin(), got[i].depth.end());
  }
  const int64_t n = end - begin, h = got[0].height, w = got[0].width;
  auto wrap = [](std::vector<float>& v, Shape s) {
    return Tensor::wrap(v.data(), s, DType::F32, nullptr);
  };
  return {test::compare(wrap(pose, {n, 9}), want.at("pose_enc").slice(begin, end)).relative(),
          test::compare(wrap(depth, {n, h, w}), want.at("depth").slice(begin, end)).relative()};
}

TEST(SpecialCap, TinyFixtureDepartsOnlyAfterTheCap) {
  const auto want = read_safetensors(test::fixtures_dir() + "/tiny/stream_kf1.safetensors").tensors;
  const std::vector<FrameResult> capped = run_tiny(2);
  ASSERT_EQ(capped.size(), 16u);
  for (const FrameResult& r : capped) {
    for (float v : r.pose_enc) ASSERT_TRUE(std::isfinite(v)) << r.index;
    for (float v : r.depth) ASSERT_TRUE(std::isfinite(v)) << r.index;
  }
  const Diff before = compare(capped, want, 0, kCapped);
  EXPECT_LE(before.pose, 1e-4);
  EXPECT_LE(before.depth, 1e-4);
  const Diff after = compare(capped, want, kCapped, 16), all = compare(capped, want, 0, 16);
  EXPECT_GT(after.pose, 1e-4) << "the cap should change what frames 12..15 attend to";
  std::printf(
      "[ cap ] tiny, max_special_frames 2: frames 0-11 pose_enc %.2e depth %.2e; frames 12-15 "
      "pose_enc %.2e depth %.2e; whole sequence pose_enc %.2e depth %.2e (relative)\n",
      before.pose, before.depth, after.pose, after.depth, all.pose, all.depth);
  // A cap the run never reaches changes nothing.
  const Diff loose = compare(run_tiny(6), want, 0, 16);
  EXPECT_LE(loose.pose, 1e-4);
  EXPECT_LE(loose.depth, 1e-4);
}

class SpecialCapCli : public test::TempDirTest {};

TEST_F(SpecialCapCli, CapsTheSpecialStreamAndReportsCacheBytes) {
  const test::CliResult r =
      test::run_cli("run --model synthetic:1 --arch tiny --input " + test::fixtures_dir() +
                    "/tiny/frames --preprocess none --scale-frames 4 --window 6 --quiet "
                    "--max-special-frames 2 --out " +
                    path("out") + " --cache-stats " + path("stats.jsonl"));
  ASSERT_EQ(r.code, 0) << r.output;
  std::ifstream stats(path("stats.jsonl"));
  nlohmann::json last;
  for (std::string line; std::getline(stats, line);) last = nlohmann::json::parse(line);
  EXPECT_EQ(last["special_frames"], 2);
  EXPECT_EQ(last["special_tokens"], (4 + 6 + 2) * 6);
  EXPECT_GT(last["special_bytes"].get<int64_t>(), 0);
  EXPECT_GT(last["camera_cache_bytes"].get<int64_t>(), 0);
}

}  // namespace
}  // namespace lingbot
