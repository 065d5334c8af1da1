// predictions.safetensors as PredictionsWriter streams it: every tensor of every frame, in one
// gapless buffer as strict safetensors readers demand, and complete or absent whatever happens.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "lingbot/error.h"
#include "lingbot/exports.h"
#include "lingbot/preflight.h"
#include "sinks_test_util.h"
#include "test_util.h"
#include "weights/safetensors.h"

namespace lingbot {
namespace {

using Predictions = test::TempDirTest;

std::vector<FrameResult> frames(int n) {
  std::vector<FrameResult> out;
  for (int i = 0; i < n; ++i) {
    out.push_back(test::make_frame(i));
    out.back().scale_frame = i < 2;
  }
  return out;
}

std::string read_all(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), {}};
}

template <class T>
std::vector<T> values(const Tensor& t) {
  return std::vector<T>(t.data<T>(), t.data<T>() + t.numel());
}

TEST_F(Predictions, HoldEveryTensorOfEveryFrame) {
  const std::vector<FrameResult> in = frames(5);
  PredictionsWriter w(path("p.safetensors"));
  for (const FrameResult& f : in) w.add(f);
  WindowAlignment a{.index = 1, .begin = 2, .end = 5, .scale = 1.5f};
  for (int i = 0; i < 16; ++i) a.transform[size_t(i)] = 0.25f * float(i);
  w.add_window(WindowAlignment{.index = 0, .end = 3});
  w.add_window(a);
  w.finish();

  const SafetensorsFile file = read_safetensors(path("p.safetensors"));
  const TensorMap& t = file.tensors;
  EXPECT_EQ(file.metadata.at("mode"), "windowed");
  EXPECT_EQ(t.at("depth").shape(), (Shape{5, test::kH, test::kW}));
  EXPECT_EQ(t.at("depth_conf").shape(), (Shape{5, test::kH, test::kW}));
  EXPECT_EQ(t.at("pose_enc").shape(), (Shape{5, 9}));
  EXPECT_EQ(t.at("c2w").shape(), (Shape{5, 3, 4}));
  EXPECT_EQ(t.at("w2c").shape(), (Shape{5, 3, 4}));
  EXPECT_EQ(t.at("intrinsics").shape(), (Shape{5, 3, 3}));
  EXPECT_EQ(t.at("chunk_scales").shape(), (Shape{2}));
  EXPECT_EQ(t.at("chunk_transforms").shape(), (Shape{2, 4, 4}));
  EXPECT_EQ(t.at("is_keyframe").dtype(), DType::Bool);
  std::vector<float> depth, conf, pose, c2w, w2c, k;
  std::vector<uint8_t> type, key;
  for (const FrameResult& f : in) {
    depth.insert(depth.end(), f.depth.begin(), f.depth.end());
    conf.insert(conf.end(), f.confidence.begin(), f.confidence.end());
    pose.insert(pose.end(), f.pose_enc.begin(), f.pose_enc.end());
    c2w.insert(c2w.end(), f.c2w.begin(), f.c2w.end());
    w2c.insert(w2c.end(), f.w2c.begin(), f.w2c.end());
    k.insert(k.end(), f.intrinsics.begin(), f.intrinsics.end());
    type.push_back(f.scale_frame ? 0 : f.keyframe ? 1 : 2);
    key.push_back(f.keyframe);
  }
  EXPECT_EQ(values<float>(t.at("depth")), depth);
  EXPECT_EQ(values<float>(t.at("depth_conf")), conf);
  EXPECT_EQ(values<float>(t.at("pose_enc")), pose);
  EXPECT_EQ(values<float>(t.at("c2w")), c2w);
  EXPECT_EQ(values<float>(t.at("w2c")), w2c);
  EXPECT_EQ(values<float>(t.at("intrinsics")), k);
  EXPECT_EQ(values<uint8_t>(t.at("frame_type")), (std::vector<uint8_t>{0, 0, 1, 2, 1}));
  EXPECT_EQ(values<uint8_t>(t.at("frame_type")), type);
  EXPECT_EQ(values<uint8_t>(t.at("is_keyframe")), key);
  EXPECT_EQ(values<float>(t.at("chunk_scales")), (std::vector<float>{1.0f, 1.5f}));
  const std::vector<float> tr = values<float>(t.at("chunk_transforms"));
  EXPECT_TRUE(std::equal(a.transform.begin(), a.transform.end(), tr.begin() + 16));
  // Only the file is left.
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir_), {}), 1);
}

// Read as the strict readers do (the safetensors library refuses anything else): the tensors
// tile the data buffer from 0 to the end of the file with no gap or overlap, and each starts
// aligned to its element size; the header is JSON padded with spaces.
TEST_F(Predictions, FormOneGaplessAlignedBuffer) {
  for (const bool windowed : {false, true}) {
    PredictionsWriter w(path("p.safetensors"));
    for (const FrameResult& f : frames(3)) w.add(f);
    if (windowed) w.add_window({});
    w.finish();
    const std::string bytes = read_all(path("p.safetensors"));
    ASSERT_GT(bytes.size(), 8u);
    uint64_t n = 0;
    for (int i = 7; i >= 0; --i) n = (n << 8) | uint8_t(bytes[size_t(i)]);
    ASSERT_LE(8 + n, bytes.size());
    const std::string header = bytes.substr(8, n);
    EXPECT_EQ(header.front(), '{');
    EXPECT_EQ(header.find_last_not_of(' '), header.rfind('}'));
    const auto j = nlohmann::json::parse(header);
    std::vector<std::array<uint64_t, 3>> spans;  // begin, end, element size
    for (const auto& [name, e] : j.items()) {
      if (name == "__metadata__") continue;
      const std::string dtype = e["dtype"];
      spans.push_back({e["data_offsets"][0], e["data_offsets"][1], dtype == "F32" ? 4u : 1u});
    }
    EXPECT_EQ(spans.size(), windowed ? 10u : 8u);
    std::sort(spans.begin(), spans.end());
    uint64_t at = 0;
    for (const auto& [b, e, size] : spans) {
      EXPECT_EQ(b, at);
      EXPECT_EQ((8 + n + b) % size, 0u);
      at = e;
    }
    EXPECT_EQ(8 + n + at, bytes.size());
    // What the preflight checks the disk against.
    EXPECT_EQ(bytes.size(), predictions_file_bytes(test::kH, test::kW, 3) + (windowed ? 68 : 0));
  }
}

TEST_F(Predictions, DiskSpaceIsThatOfTheNearestExistingFolder) {
  const size_t here = disk_space_available(path(""));
  EXPECT_GT(here, 0u);
  // A folder the run will create: that of the folder it goes in (within what others wrote
  // meanwhile).
  const size_t later = disk_space_available(path("not/yet/there"));
  EXPECT_NEAR(double(later), double(here), 1e8);
}

TEST_F(Predictions, AreCompleteOrAbsentAndLeaveNoPartialFiles) {
  // A run that got no frame writes no file.
  {
    PredictionsWriter w(path("none.safetensors"));
    w.finish();
  }
  EXPECT_FALSE(std::filesystem::exists(path("none.safetensors")));
  // A run that fails (the writer destroyed unfinished) leaves the file of the run before it.
  {
    PredictionsWriter w(path("p.safetensors"));
    w.add(test::make_frame(0));
    w.finish();
  }
  const std::string before = read_all(path("p.safetensors"));
  {
    PredictionsWriter w(path("p.safetensors"));
    for (const FrameResult& f : frames(4)) w.add(f);
  }
  EXPECT_EQ(read_all(path("p.safetensors")), before);
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir_), {}), 1);
  // Frames of another size are refused, and the file is still written for those before.
  PredictionsWriter w(path("q.safetensors"));
  w.add(test::make_frame(0));
  FrameResult other = test::make_frame(1);
  other.width = test::kW / 2;
  other.depth.resize(size_t(test::kH * test::kW / 2));
  other.confidence.resize(other.depth.size());
  EXPECT_THROW(w.add(other), Error);
  w.finish();
  EXPECT_EQ(read_safetensors(path("q.safetensors")).tensors.at("depth").dim(0), 1);
}

TEST_F(Predictions, UnwritableFolderThrowsError) {
  EXPECT_THROW(PredictionsWriter(path("missing/p.safetensors")), Error);
}

}  // namespace
}  // namespace lingbot
