// The lingbot-map program end to end: results through files, and one clear line with a
// non-zero exit for each kind of bad input.
#include <gtest/gtest.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "io/image.h"
#include "lingbot/render.h"
#include "test_util.h"
#include "weights/safetensors.h"
#include "weights/synthetic.h"

namespace lingbot {
namespace {

namespace fs = std::filesystem;

using Result = test::CliResult;
const auto cli = test::run_cli;

class Cli : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = fs::temp_directory_path() / ("lingbot_cli_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
    // A tiny checkpoint file with the synthetic weights (every key of the fixture model).
    std::ifstream f(test::fixtures_dir() + "/tiny/weights_digest.json");
    auto digest = nlohmann::json::parse(f);
    for (auto& [name, entry] : digest.items())
      tiny_[name] = synthetic_tensor(1, name, entry["shape"].get<Shape>());
    write_safetensors((dir_ / "tiny.safetensors").string(), tiny_);
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }

  static std::string path(const std::string& name) { return (dir_ / name).string(); }
  static std::string frames() { return test::fixtures_dir() + "/tiny/frames"; }
  static std::string tiny_args() { return "--preprocess none --scale-frames 4 --window 6 --quiet"; }

  static fs::path dir_;
  static TensorMap tiny_;
};
fs::path Cli::dir_;
TensorMap Cli::tiny_;

// bench --streams: every stream delivers all its frames (bench exits non-zero otherwise), and
// the report has one entry per stream with a positive rate and ordered latency quantiles.
TEST_F(Cli, BenchWithSeveralStreamsReportsEach) {
  Result r =
      cli("bench --model synthetic:1 --arch tiny --height 28 --width 42 --frames 12 "
          "--scale-frames 4 --window 6 --warmup 2 --streams 3 --json " +
          path("streams.json"));
  ASSERT_EQ(r.code, 0) << r.output;
  std::ifstream f(path("streams.json"));
  const auto j = nlohmann::json::parse(f);
  EXPECT_EQ(j.at("streams"), 3);
  ASSERT_EQ(j.at("per_stream").size(), 3u);
  for (const auto& s : j.at("per_stream")) {
    EXPECT_GT(s.at("fps").get<double>(), 0);
    EXPECT_LE(s.at("latency_ms_p50").get<double>(), s.at("latency_ms_p99").get<double>());
  }
  EXPECT_GT(j.at("aggregate_fps").get<double>(), 0);
  EXPECT_GT(j.at("preflight_gb").get<double>(), 0);
}

// bench --rate: each stream is paced as a live camera (frame i captured at i / rate), so the run
// lasts at least the last capture time, and every frame still gets its result.
TEST_F(Cli, BenchFeedsLiveCamerasAtARate) {
  const auto t0 = std::chrono::steady_clock::now();
  Result r =
      cli("bench --model synthetic:1 --arch tiny --height 28 --width 42 --frames 10 "
          "--scale-frames 4 --window 6 --warmup 0 --streams 2 --rate 4 --stagger --json " +
          path("rate.json"));
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_GE(s, 9 / 4.0);
  EXPECT_NE(r.output.find("live cameras: 4.00 frames/s each (8.00 offered), capture times "
                          "staggered"),
            std::string::npos)
      << r.output;
  std::ifstream f(path("rate.json"));
  const auto j = nlohmann::json::parse(f);
  EXPECT_EQ(j.at("rate").get<double>(), 4);
  EXPECT_TRUE(j.at("stagger").get<bool>());
  EXPECT_LE(j.at("steady_latency_ms_p50").get<double>(),
            j.at("steady_latency_ms_p99").get<double>());
  // Cameras far slower than the model: both catch up after their phase 1, and the frames after
  // that are the caught-up ones.
  EXPECT_GT(j.at("caught_up_after_s").get<double>(), 0);
  EXPECT_GT(j.at("caught_up_frames").get<int>(), 0);
  EXPECT_LE(j.at("caught_up_frames").get<int>(), j.at("steady_frames").get<int>());
  EXPECT_LE(j.at("caught_up_latency_ms_p50").get<double>(),
            j.at("caught_up_latency_ms_p99").get<double>());
  EXPECT_NE(r.output.find("latency once every stream has caught up"), std::string::npos)
      << r.output;
  for (const auto& st : j.at("per_stream")) {
    EXPECT_GT(st.at("fps").get<double>(), 0);
    EXPECT_GE(st.at("latency_ms_p50").get<double>(), 0);
  }
  Result bad = cli("bench --model synthetic:1 --arch tiny --stagger");
  EXPECT_NE(bad.code, 0);
  EXPECT_NE(bad.output.find("--stagger staggers live cameras: it needs --rate"), std::string::npos)
      << bad.output;
}

// LINGBOT_PROFILE=host: per stretch of frames, the host's time queueing each step and waiting for
// the device, without synchronizing; the frame time bounds what the host spends queueing.
TEST_F(Cli, BenchReportsHostPhasesPerStretch) {
  setenv("LINGBOT_PROFILE", "host", 1);
  Result r =
      cli("bench --model synthetic:1 --arch tiny --height 28 --width 42 --frames 12 "
          "--scale-frames 4 --window 6 --warmup 0 --profile-every 4 --json " +
          path("host.json"));
  unsetenv("LINGBOT_PROFILE");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("frames 0-4, host phases:"), std::string::npos) << r.output;
  std::ifstream f(path("host.json"));
  const auto j = nlohmann::json::parse(f);
  const auto& stretches = j.at("profile");
  ASSERT_EQ(stretches.size(), 2u);  // 8 streamed frames, 4 per stretch
  for (const auto& st : stretches) {
    const auto& ms = st.at("ms_per_frame");
    EXPECT_GT(ms.at("host: queue a step").get<double>(), 0);
    EXPECT_GE(ms.at("host: wait for the device").get<double>(), 0);
    EXPECT_EQ(ms.count("dino trunk"), 0u);  // no synchronized stage in this mode
  }
}

// A run's report holds its own stage times (RunReport::profile_ms: what the engine's totals grew
// by during it), and nothing of the kind without LINGBOT_PROFILE.
TEST_F(Cli, RunReportHoldsTheRunsHostPhases) {
  setenv("LINGBOT_PROFILE", "host", 1);
  Result r = cli("run --model synthetic:1 --arch tiny --input " + frames() + " " + tiny_args() +
                 " --out " + path("profiled") + " --json " + path("profiled.json"));
  unsetenv("LINGBOT_PROFILE");
  ASSERT_EQ(r.code, 0) << r.output;
  std::ifstream f(path("profiled.json"));
  const auto j = nlohmann::json::parse(f);
  const auto& ms = j.at("profile_ms");
  EXPECT_GT(ms.at("host: queue a step").get<double>(), 0);
  EXPECT_GE(ms.at("host: wait for the device").get<double>(), 0);
  EXPECT_EQ(ms.count("dino trunk"), 0u);  // no synchronized stage in this mode
  // The whole run's queueing is at most its device thread's time.
  EXPECT_LE(ms.at("host: queue a step").get<double>(), 1e3 * j.at("device_s").get<double>());
  Result plain = cli("run --model synthetic:1 --arch tiny --input " + frames() + " " + tiny_args() +
                     " --out " + path("plain") + " --json " + path("plain.json"));
  ASSERT_EQ(plain.code, 0) << plain.output;
  std::ifstream g(path("plain.json"));
  EXPECT_EQ(nlohmann::json::parse(g).count("profile_ms"), 0u);
}

TEST_F(Cli, RunWritesPredictionsMatchingTheReference) {
  Result r = cli("run --model " + path("tiny.safetensors") + " --input " + frames() + " " +
                 tiny_args() + " --out " + path("out") + " --cache-stats " + path("stats.jsonl"));
  ASSERT_EQ(r.code, 0) << r.output;
  auto got = read_safetensors(path("out/predictions.safetensors")).tensors;
  auto want = read_safetensors(test::fixtures_dir() + "/tiny/stream_kf1.safetensors").tensors;
  EXPECT_LE(test::compare(got.at("pose_enc"), want.at("pose_enc")).relative(), 1e-4);
  EXPECT_LE(test::compare(got.at("depth"), want.at("depth")).relative(), 1e-4);
  EXPECT_LE(test::compare(got.at("depth_conf"), want.at("depth_conf")).relative(), 1e-4);
  EXPECT_EQ(got.at("c2w").shape(), (Shape{16, 3, 4}));
  EXPECT_EQ(got.at("w2c").shape(), (Shape{16, 3, 4}));
  EXPECT_EQ(got.at("intrinsics").shape(), (Shape{16, 3, 3}));
  std::ifstream stats(path("stats.jsonl"));
  std::string line;
  int n = 0;
  nlohmann::json last;
  while (std::getline(stats, line)) last = nlohmann::json::parse(line), ++n;
  EXPECT_EQ(n, 16);
  EXPECT_EQ(last["frame"], 15);
  EXPECT_EQ(last["stored_frames"], 16);
  EXPECT_EQ(last["scale_pages"], 4);
  EXPECT_EQ(last["live_pages"], 6);
  EXPECT_EQ(last["free_pages"], 1);
  EXPECT_EQ(last["special_tokens"], 16 * 6);
}

// `convert synthetic:SEED` writes exactly the tensors the model asks for: the fixture model's
// keys (less the training-only mask token), with the synthetic values.
TEST_F(Cli, ConvertWritesSyntheticWeightsAsACheckpoint) {
  Result r = cli("convert synthetic:1 --arch tiny " + path("synthetic.safetensors"));
  ASSERT_EQ(r.code, 0) << r.output;
  auto got = read_safetensors(path("synthetic.safetensors")).tensors;
  for (auto& [name, want] : tiny_) {
    if (name == "aggregator.patch_embed.mask_token") continue;
    ASSERT_TRUE(got.count(name)) << name;
    EXPECT_EQ(test::compare(got.at(name), want).max_abs_err, 0.0) << name;
  }
  EXPECT_EQ(got.size(), tiny_.size() - 1);
  test::expect_clean_cli_failure("convert synthetic:x " + path("bad.safetensors"), "numeric seed");
}

// A bf16 .pt written by convert loads to the same weights (synthetic values are exact in bf16),
// so a run from it gives bitwise the predictions of a run from the fp32 safetensors.
TEST_F(Cli, RunFromABf16PtCheckpointMatchesSafetensors) {
  Result c = cli("convert " + path("tiny.safetensors") + " " + path("tiny.pt") + " --dtype bf16");
  ASSERT_EQ(c.code, 0) << c.output;
  for (const char* model : {"tiny.safetensors", "tiny.pt"}) {
    Result r = cli("run --model " + path(model) + " --input " + frames() + " " + tiny_args() +
                   " --out " + path(std::string("from_") + model));
    ASSERT_EQ(r.code, 0) << r.output;
  }
  auto a = read_safetensors(path("from_tiny.safetensors/predictions.safetensors")).tensors;
  auto b = read_safetensors(path("from_tiny.pt/predictions.safetensors")).tensors;
  ASSERT_EQ(a.size(), b.size());
  for (auto& [name, t] : a) EXPECT_EQ(test::compare(b.at(name), t).max_abs_err, 0.0) << name;
}

TEST_F(Cli, WindowedRunMatchesTheReference) {
  Result r = cli("run --model synthetic:1 --arch tiny --input " + frames() +
                 " --preprocess none --scale-frames 4 --mode windowed --window-size 8 --overlap 4"
                 " --quiet --export tum --out " +
                 path("win"));
  ASSERT_EQ(r.code, 0) << r.output;
  auto got = read_safetensors(path("win/predictions.safetensors")).tensors;
  auto want = read_safetensors(test::fixtures_dir() + "/tiny/windowed.safetensors").tensors;
  EXPECT_LE(test::compare(got.at("pose_enc"), want.at("pose_enc")).relative(), 1e-4);
  EXPECT_LE(test::compare(got.at("depth"), want.at("depth")).relative(), 1e-4);
  EXPECT_LE(test::compare(got.at("chunk_scales"), want.at("chunk_scales")).relative(), 1e-4);
  EXPECT_TRUE(fs::exists(path("win/trajectory_tum.txt")));
}

TEST_F(Cli, DemoRunsEndToEnd) {
  Result r = cli("demo --frames 6 --quiet --out " + path("demo"));
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("meaningless"), std::string::npos);
  auto got = read_safetensors(path("demo/predictions.safetensors")).tensors;
  EXPECT_EQ(got.at("pose_enc").shape(), (Shape{6, 9}));
  // It ends with the result rendered: a video, or PNG frames in a build without FFmpeg.
  EXPECT_NE(r.output.find("rendered:      " + path("demo/fly")), std::string::npos) << r.output;
  EXPECT_TRUE(fs::exists(video_encoding_supported() ? path("demo/fly.mp4")
                                                    : path("demo/fly/frame_000005.png")));
  EXPECT_TRUE(fs::exists(path("demo/images/000005.png")));  // its colours
}

TEST_F(Cli, MissingCheckpoint) {
  test::expect_clean_cli_failure(
      "run --model " + path("nope.pt") + " --input " + frames() + " --out " + path("x"), "nope.pt");
}

TEST_F(Cli, CorruptAndTruncatedCheckpoints) {
  std::ofstream(path("garbage.safetensors")) << "this is not a checkpoint at all";
  test::expect_clean_cli_failure(
      "run --model " + path("garbage.safetensors") + " --input " + frames() + " --out " + path("x"),
      "garbage.safetensors");
  fs::copy_file(path("tiny.safetensors"), path("cut.safetensors"));
  fs::resize_file(path("cut.safetensors"), fs::file_size(path("cut.safetensors")) / 2);
  test::expect_clean_cli_failure(
      "run --model " + path("cut.safetensors") + " --input " + frames() + " --out " + path("x"),
      "cut.safetensors");
}

TEST_F(Cli, MissingUnexpectedAndMisshapenKeysAreNamed) {
  TensorMap m = tiny_;
  m.erase("aggregator.global_blocks.7.attn.proj.bias");
  write_safetensors(path("missing.safetensors"), m);
  test::expect_clean_cli_failure("run --model " + path("missing.safetensors") + " --input " +
                                     frames() + " " + tiny_args() + " --out " + path("x"),
                                 "aggregator.global_blocks.7.attn.proj.bias");
  m = tiny_;
  m["point_head.extra.weight"] = Tensor::zeros({2, 2});
  write_safetensors(path("extra.safetensors"), m);
  test::expect_clean_cli_failure("run --model " + path("extra.safetensors") + " --input " +
                                     frames() + " " + tiny_args() + " --out " + path("x"),
                                 "point_head.extra.weight");
  m = tiny_;
  m["camera_head.trunk.2.attn.qkv.weight"] = Tensor::zeros({4, 4});
  write_safetensors(path("shape.safetensors"), m);
  test::expect_clean_cli_failure("run --model " + path("shape.safetensors") + " --input " +
                                     frames() + " " + tiny_args() + " --out " + path("x"),
                                 "camera_head.trunk.2.attn.qkv.weight");
}

TEST_F(Cli, BadFrames) {
  fs::create_directories(path("empty"));
  test::expect_clean_cli_failure(
      "run --model synthetic:1 --arch tiny --input " + path("empty") + " --out " + path("x"),
      "no .png");
  test::expect_clean_cli_failure(
      "run --model synthetic:1 --arch tiny --input " + path("absent") + " --out " + path("x"),
      "absent");
  // Two sizes in one sequence.
  fs::create_directories(path("mixed"));
  ImageU8 a{70, 56, std::vector<uint8_t>(70 * 56 * 3, 100)},
      b{84, 56, std::vector<uint8_t>(84 * 56 * 3, 50)};
  write_png(path("mixed/0.png"), a);
  write_png(path("mixed/1.png"), b);
  test::expect_clean_cli_failure("run --model synthetic:1 --arch tiny --input " + path("mixed") +
                                     " --preprocess none --scale-frames 1 --quiet --out " +
                                     path("x"),
                                 "one size");
  // Not a multiple of the patch size without resizing.
  fs::create_directories(path("odd"));
  write_png(path("odd/0.png"), ImageU8{50, 40, std::vector<uint8_t>(50 * 40 * 3, 10)});
  test::expect_clean_cli_failure("run --model synthetic:1 --arch tiny --input " + path("odd") +
                                     " --preprocess none --out " + path("x"),
                                 "multiples");
  // A corrupt frame.
  fs::create_directories(path("corrupt"));
  std::ofstream(path("corrupt/0.png")) << "\x89PNG\r\n\x1a\n garbage";
  test::expect_clean_cli_failure(
      "run --model synthetic:1 --arch tiny --input " + path("corrupt") + " --out " + path("x"),
      "0.png");
}

TEST_F(Cli, BadOptions) {
  test::expect_clean_cli_failure(
      "run --model synthetic:x --arch tiny --input " + frames() + " --out " + path("x"), "seed");
  test::expect_clean_cli_failure(
      "run --model synthetic:1 --arch huge --input " + frames() + " --out " + path("x"), "huge");
  test::expect_clean_cli_failure("run --model synthetic:1 --arch tiny --device tpu --input " +
                                     frames() + " --out " + path("x"),
                                 "tpu");
  // Command-line parse errors are one line too.
  test::expect_clean_cli_failure(
      "run --input " + frames() + " --out " + path("x") + " --max-special-frames -1", ">= 0");
  test::expect_clean_cli_failure("run --input " + frames() + " --out " + path("x") + " --fps x",
                                 "not a number");
  test::expect_clean_cli_failure(
      "run --model synthetic:1 --input " + frames() + " --out " + path("x") + " --no-such-flag",
      "no-such-flag");
}

}  // namespace
}  // namespace lingbot
