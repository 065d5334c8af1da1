// The run pipeline (lingbot/run.h): readers, the device step and the output threads give the
// results of pushing the frames one by one, in frame order, with bounded queues, and fail with
// one message whichever stage fails.
#include "lingbot/run.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "lingbot/error.h"
#include "run/prefetch.h"
#include "test_util.h"
#include "tiny_frames.h"
#include "weights/safetensors.h"

namespace lingbot {
namespace {

namespace fs = std::filesystem;

// Frames from memory, read in any order with a random delay each, failing at `fail_at`.
class ScriptedSource final : public FrameSource {
 public:
  explicit ScriptedSource(std::vector<Tensor> frames, int64_t fail_at = -1)
      : frames_(std::move(frames)), fail_at_(fail_at) {}
  std::optional<Tensor> get(int64_t i) override {
    const int64_t ahead = i - taken.load();
    for (int64_t seen = max_ahead.load();
         ahead > seen && !max_ahead.compare_exchange_weak(seen, ahead);) {
    }
    thread_local std::mt19937 rng(std::hash<std::thread::id>()(std::this_thread::get_id()));
    std::this_thread::sleep_for(std::chrono::microseconds(rng() % 3000));
    if (i == fail_at_) throw Error("frame " + std::to_string(i) + " is damaged");
    if (i < 0 || i >= static_cast<int64_t>(frames_.size())) return std::nullopt;
    return frames_[i];
  }
  int64_t count() const override { return static_cast<int64_t>(frames_.size()); }
  bool concurrent() const override { return true; }
  Times times() const override { return {}; }

  std::atomic<int64_t> taken{0}, max_ahead{0};

 private:
  std::vector<Tensor> frames_;
  int64_t fail_at_;
};

// An output that records the order it is fed in, optionally slowly, optionally failing.
class RecordingSink final : public ResultSink {
 public:
  explicit RecordingSink(int sleep_ms = 0, int64_t fail_at = -1)
      : sleep_ms_(sleep_ms), fail_at_(fail_at) {}
  void add(const FrameResult& r, const Tensor* frame) override {
    std::this_thread::sleep_for(std::chrono::milliseconds(sleep_ms_));
    if (r.index == fail_at_) throw Error("the disk is full");
    std::lock_guard<std::mutex> lock(m);
    order.push_back(r.index);
    had_frame = had_frame && frame != nullptr;
    ++written;
  }
  void finish() override { finished = true; }
  std::string name() const override { return "recording"; }

  std::mutex m;
  std::vector<int64_t> order;
  std::atomic<int64_t> written{0};
  bool had_frame = true, finished = false;

 private:
  int sleep_ms_;
  int64_t fail_at_;
};

std::vector<FrameResult> push_one_by_one(Engine& engine, const StreamOptions& o,
                                         const std::vector<Tensor>& frames) {
  std::vector<FrameResult> out;
  auto session = engine.start(o);
  auto keep = [&](const FrameResult& r) { out.push_back(r); };
  for (const Tensor& f : frames) session->push(f, keep);
  session->finish(keep);
  return out;
}

void expect_identical(const std::vector<FrameResult>& got, const std::vector<FrameResult>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    SCOPED_TRACE("frame " + std::to_string(i));
    EXPECT_EQ(got[i].index, want[i].index);
    EXPECT_EQ(got[i].keyframe, want[i].keyframe);
    EXPECT_EQ(got[i].scale_frame, want[i].scale_frame);
    EXPECT_EQ(0, std::memcmp(got[i].pose_enc.data(), want[i].pose_enc.data(), 9 * sizeof(float)));
    EXPECT_EQ(got[i].depth, want[i].depth);
    EXPECT_EQ(got[i].confidence, want[i].confidence);
  }
}

class RunPipeline : public ::testing::Test {
 protected:
  void SetUp() override {
    frames_ = test::tiny_frames();
    out_ =
        (fs::temp_directory_path() / ("lingbot_run_test_" + std::to_string(::getpid()))).string();
    fs::remove_all(out_);
  }
  void TearDown() override { fs::remove_all(out_); }

  std::unique_ptr<Engine> engine_ = Engine::create({.model = "synthetic:1", .arch = "tiny"});
  std::vector<Tensor> frames_;
  std::string out_;
  const StreamOptions stream_{.scale_frames = 4, .window = 6};
};

TEST_F(RunPipeline, GivesBitForBitTheResultsOfPushingFramesOneByOne) {
  for (int interval : {1, 2}) {
    SCOPED_TRACE("keyframe interval " + std::to_string(interval));
    StreamOptions o = stream_;
    o.keyframe_interval = interval;
    ScriptedSource source(frames_);
    std::vector<FrameResult> got;
    RunOptions ro{.stream = o, .prefetch = 3, .read_threads = 4};
    ro.on_result = [&](const FrameResult& r, const Tensor& frame) {
      got.push_back(r);
      source.taken = r.index + 1;
      // The frame handed out with a result is the one that was pushed for it.
      EXPECT_EQ(0, std::memcmp(frame.raw(), frames_[r.index].raw(), frame.nbytes()));
    };
    const RunReport report = run(*engine_, source, ro);
    expect_identical(got, push_one_by_one(*engine_, o, frames_));
    EXPECT_EQ(report.frames, 16);
    EXPECT_EQ(report.read_threads, 4);
    EXPECT_GT(report.latency_p50_ms, 0);
    EXPECT_GE(report.latency_p99_ms, report.latency_p50_ms);
  }
}

TEST_F(RunPipeline, WritesThePredictionsAndExportsOfTheSession) {
  ScriptedSource source(frames_);
  RunOptions ro{.stream = stream_, .out_dir = out_};
  ro.exports.formats = parse_export_list("tum,json,ply,depth_f32");
  const RunReport report = run(*engine_, source, ro);
  const auto want = push_one_by_one(*engine_, stream_, frames_);
  const TensorMap p = read_safetensors(out_ + "/predictions.safetensors").tensors;
  ASSERT_EQ(p.at("depth").dim(0), 16);
  for (int64_t i = 0; i < 16; ++i) {
    EXPECT_EQ(0, std::memcmp(p.at("pose_enc").f32() + i * 9, want[i].pose_enc.data(), 36));
    EXPECT_EQ(p.at("frame_type").data<uint8_t>()[i], i < 4 ? 0 : 1);
  }
  // Every export in frame order.
  std::ifstream tum(out_ + "/trajectory_tum.txt");
  double t = -1, prev = -1;
  int lines = 0;
  for (std::string line; std::getline(tum, line); ++lines) {
    t = std::stod(line);
    EXPECT_GT(t, prev);
    prev = t;
  }
  EXPECT_EQ(lines, 16);
  std::ifstream json(out_ + "/frames.jsonl");
  int64_t expect = 0;
  for (std::string line; std::getline(json, line);)
    EXPECT_EQ(nlohmann::json::parse(line)["index"].get<int64_t>(), expect++);
  EXPECT_EQ(expect, 16);
  EXPECT_TRUE(fs::exists(out_ + "/depth_f32/frame_000015.npy"));
  for (const char* name : {"tum", "json", "ply", "depth_f32"})
    EXPECT_EQ(report.outputs.count(name), 1u) << name;
  EXPECT_NE(describe(report).find("frames/s"), std::string::npos);
  EXPECT_EQ(nlohmann::json::parse(to_json(report))["frames"].get<int64_t>(), 16);
}

TEST_F(RunPipeline, WindowedRunDeliversTheStitchedResultsInOrder) {
  const WindowedOptions w{
      .window_size = 8, .overlap = 4, .stream = {.scale_frames = 4, .window = 6}};
  const WindowedResult want = run_windowed(
      *engine_, 16, [&](int64_t i) { return frames_[i]; }, w);
  ScriptedSource source(frames_);
  auto sink = std::make_shared<RecordingSink>();
  RunOptions ro{.windowed = w, .out_dir = out_, .sinks = {sink}};
  const RunReport report = run(*engine_, source, ro);
  EXPECT_EQ(report.windows, 3);
  const TensorMap p = read_safetensors(out_ + "/predictions.safetensors").tensors;
  for (const char* name : {"pose_enc", "depth", "depth_conf", "chunk_scales", "chunk_transforms"}) {
    const Tensor& g = p.at(name);
    const Tensor& e = name == std::string("pose_enc")       ? want.pose_enc
                      : name == std::string("depth")        ? want.depth
                      : name == std::string("depth_conf")   ? want.depth_conf
                      : name == std::string("chunk_scales") ? want.chunk_scales
                                                            : want.chunk_transforms;
    ASSERT_EQ(g.nbytes(), e.nbytes()) << name;
    EXPECT_EQ(0, std::memcmp(g.raw(), e.raw(), g.nbytes())) << name;
  }
  std::vector<int64_t> in_order(16);
  for (int64_t i = 0; i < 16; ++i) in_order[i] = i;
  EXPECT_EQ(sink->order, in_order);
  EXPECT_TRUE(sink->had_frame);
  EXPECT_TRUE(sink->finished);
}

TEST_F(RunPipeline, ReadersStayWithinThePrefetch) {
  ScriptedSource source(frames_);
  FramePrefetch prefetch(source, 4, 3);
  int64_t n = 0;
  while (std::optional<Tensor> f = prefetch.next()) {
    EXPECT_EQ(0, std::memcmp(f->raw(), frames_[n].raw(), f->nbytes())) << n;
    source.taken = ++n;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));  // a slow device
  }
  EXPECT_EQ(n, 16);
  // A frame is read only while fewer than 3 wait: at most 3 ahead of those handed out (the
  // test learns of a hand-out just after it happens, hence one more).
  EXPECT_LE(source.max_ahead.load(), 3);
}

TEST_F(RunPipeline, ASlowOutputHoldsTheDeviceBackAtItsQueue) {
  ScriptedSource source(frames_);
  auto slow = std::make_shared<RecordingSink>(15);
  int64_t delivered = 0, most_waiting = 0;
  RunOptions ro{.stream = stream_, .sinks = {slow}, .output_queue = 2};
  ro.on_result = [&](const FrameResult&, const Tensor&) {
    most_waiting = std::max(most_waiting, ++delivered - slow->written.load());
  };
  const RunReport report = run(*engine_, source, ro);
  EXPECT_EQ(slow->written.load(), 16);
  // At most the queue, the one being written and the one just handed over.
  EXPECT_LE(most_waiting, 2 + 2);
  EXPECT_GT(report.wait_outputs, 0);
  EXPECT_GE(report.outputs.at("recording"), 16 * 0.015 * 0.9);
}

TEST_F(RunPipeline, AFailingOutputStopsTheRunWithItsMessageAndKeepsTheOtherFiles) {
  ScriptedSource source(frames_);
  RunOptions ro{
      .stream = stream_, .out_dir = out_, .sinks = {std::make_shared<RecordingSink>(0, 6)}};
  ro.exports.formats = {"tum"};
  try {
    run(*engine_, source, ro);
    FAIL() << "the run should fail";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "export recording failed: the disk is full");
  }
  std::ifstream tum(out_ + "/trajectory_tum.txt");
  int lines = 0;
  // Whatever it holds is whole lines, in order (it may have stopped before frame 6).
  for (std::string line; std::getline(tum, line); ++lines) EXPECT_EQ(std::stod(line), lines);
  EXPECT_LE(lines, 16);
}

TEST_F(RunPipeline, ASourceFailingPartWayWritesTheFramesBeforeIt) {
  for (bool windowed : {false, true}) {
    SCOPED_TRACE(windowed ? "windowed" : "streaming");
    fs::remove_all(out_);
    ScriptedSource source(frames_, 9);
    RunOptions ro{.stream = stream_, .out_dir = out_};
    if (windowed)
      ro.windowed = WindowedOptions{
          .window_size = 8, .overlap = 4, .stream = {.scale_frames = 4, .window = 6}};
    ro.exports.formats = {"tum"};
    try {
      run(*engine_, source, ro);
      FAIL() << "the run should fail";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("frame 9 is damaged; the results of the 9 frames"),
                std::string::npos)
          << e.what();
    }
    const TensorMap p = read_safetensors(out_ + "/predictions.safetensors").tensors;
    EXPECT_EQ(p.at("pose_enc").dim(0), 9);
    if (!windowed) {  // the frames before the failure are those of a run given only them
      const auto want = push_one_by_one(*engine_, stream_,
                                        std::vector<Tensor>(frames_.begin(), frames_.begin() + 9));
      for (int64_t i = 0; i < 9; ++i)
        EXPECT_EQ(0, std::memcmp(p.at("pose_enc").f32() + i * 9, want[i].pose_enc.data(), 36));
    }
  }
}

TEST_F(RunPipeline, StopEndsTheInputAsItsEndWould) {
  ScriptedSource source(frames_);
  int64_t delivered = 0;
  RunOptions ro{.stream = stream_};
  ro.stop = [&] { return delivered >= 6; };
  ro.on_result = [&](const FrameResult&, const Tensor&) { ++delivered; };
  const RunReport report = run(*engine_, source, ro);
  EXPECT_GE(report.frames, 6);
  EXPECT_LT(report.frames, 16);
}

// The CPU computes each step within its push, so each frame's result comes within its own push
// (on a GPU, within the next one), and the report's latency is about one step.
TEST_F(RunPipeline, OnTheCpuEachResultComesWithinItsOwnPush) {
  auto session = engine_->start(stream_);
  for (int64_t i = 0; i < int64_t(frames_.size()); ++i) {
    std::vector<int64_t> got;
    session->push(frames_[size_t(i)], [&](const FrameResult& r) { got.push_back(r.index); });
    if (i + 1 < stream_.scale_frames) {
      EXPECT_TRUE(got.empty());
    } else if (i + 1 == stream_.scale_frames) {
      EXPECT_EQ(got.size(), size_t(stream_.scale_frames));
    } else {
      EXPECT_EQ(got, std::vector<int64_t>{i});
    }
  }
  ScriptedSource source(frames_);
  const RunReport report = run(*engine_, source, RunOptions{.stream = stream_});
  // 16 frames, scale 4 + window 6: the 7 frames 9.. run with the window full. Each one's latency
  // (its push) is at most the time since the previous result, so their median is at most 7/4 of
  // the mean time between results, however unevenly a loaded machine spaces the steps; a result
  // that came one push late would make it about twice that mean.
  EXPECT_TRUE(report.latency_steady);
  EXPECT_GT(report.frame_ms, 0);
  EXPECT_GT(report.latency_p50_ms, 0);
  EXPECT_LT(report.latency_p50_ms, 1.8 * report.frame_ms);
  const auto j = nlohmann::json::parse(to_json(report));
  EXPECT_EQ(j["frame_ms"].get<double>(), report.frame_ms);
  EXPECT_TRUE(j["latency_steady"].get<bool>());
}

}  // namespace
}  // namespace lingbot
