// The MCAP export's parts against the specifications: CDR bytes computed by hand, the ros2msg
// schema text, and the writer's records walked by an independent reader (mcap_test_util.h).
// Real clients (@mcap/core, @foxglove/rosmsg2-serialization) read a run's file in
// tests/mcap/mcap_test.sh.
#include <gtest/gtest.h>
#include <zlib.h>
#include <zstd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <map>

#include "io/mcap/cdr.h"
#include "io/mcap/ros_messages.h"
#include "io/mcap/writer.h"
#include "lingbot/exports.h"
#include "mcap_test_util.h"
#include "sinks_test_util.h"
#include "test_util.h"

namespace lingbot {
namespace {

namespace ros = mcap::ros;
using test::le;

std::string bytes(std::initializer_list<int> b) {
  std::string s;
  for (int v : b) s.push_back(static_cast<char>(v));
  return s;
}
std::string f64(double v) {
  std::string s(8, '\0');
  std::memcpy(s.data(), &v, 8);
  return s;
}

TEST(McapCdr, CompressedImageBytesByHand) {
  const std::string got = ros::compressed_image({{1, 2}, "ab"}, "png", "xyz");
  const std::string want = bytes({0, 1, 0, 0,                    // encapsulation: CDR_LE
                                  1, 0, 0, 0, 2,   0,   0,   0,  // stamp: sec 1, nanosec 2
                                  3, 0, 0, 0, 'a', 'b', 0,       // frame_id: length with the NUL
                                  0,                             // pad to 4
                                  4, 0, 0, 0, 'p', 'n', 'g', 0,  // format
                                  3, 0, 0, 0, 'x', 'y', 'z'});   // data: count, bytes
  EXPECT_EQ(got, want);
}

TEST(McapCdr, DoublesAlignToEightFromTheEndOfTheEncapsulation) {
  ros::TransformStamped t{{{7, 8}, "map"}, "cam", {{1.5, -2, 3}, {0, 0, 0.6, 0.8}}};
  const std::string got = ros::tf_message({t});
  std::string want =
      bytes({0, 1, 0,   0,   1,   0,   0,   0,  // one transform
             7, 0, 0,   0,   8,   0,   0,   0,  // stamp
             4, 0, 0,   0,   'm', 'a', 'p', 0, 4, 0,
             0, 0, 'c', 'a', 'm', 0,   0,   0, 0, 0});  // body offset 28: padded to 32
  for (double v : {1.5, -2.0, 3.0, 0.0, 0.0, 0.6, 0.8}) want += f64(v);
  EXPECT_EQ(got.size(), 4u + 32 + 56);
  EXPECT_EQ(got, want);
}

TEST(McapCdr, PointCloudPacksRgbAsPclDoes) {
  const std::string m = ros::point_cloud({{0, 0}, "map"}, {{1, 2, 3, 0x12, 0x34, 0x56, 2.5f}});
  // The last 21 bytes: the point (20) and is_dense.
  ASSERT_GE(m.size(), 21u);
  const std::string point = m.substr(m.size() - 21, 20);
  float f[5];
  std::memcpy(f, point.data(), 20);
  EXPECT_EQ(f[0], 1);
  EXPECT_EQ(f[2], 3);
  uint32_t rgb;
  std::memcpy(&rgb, &f[3], 4);
  EXPECT_EQ(rgb, 0x123456u);
  EXPECT_EQ(f[4], 2.5f);
  EXPECT_EQ(m.back(), 1);
}

TEST(McapSchema, CarriesEveryUsedTypeOnceAfterItsOwnDefinition) {
  const std::string sep = std::string(80, '=') + "\nMSG: ";
  EXPECT_EQ(ros::schema_text("tf2_msgs/msg/TFMessage"),
            "geometry_msgs/TransformStamped[] transforms\n" + sep +
                "geometry_msgs/TransformStamped\n"
                "std_msgs/Header header\nstring child_frame_id\ngeometry_msgs/Transform "
                "transform\n" +
                sep + "std_msgs/Header\nbuiltin_interfaces/Time stamp\nstring frame_id\n" + sep +
                "builtin_interfaces/Time\nint32 sec\nuint32 nanosec\n" + sep +
                "geometry_msgs/Transform\ngeometry_msgs/Vector3 translation\n"
                "geometry_msgs/Quaternion rotation\n" +
                sep + "geometry_msgs/Vector3\nfloat64 x\nfloat64 y\nfloat64 z\n" + sep +
                "geometry_msgs/Quaternion\nfloat64 x 0\nfloat64 y 0\nfloat64 z 0\nfloat64 w 1\n");
  // Vector3 is used twice by Twist and Odometry: once in the text.
  const std::string odom = ros::schema_text("nav_msgs/msg/Odometry");
  EXPECT_EQ(odom.find("MSG: geometry_msgs/Vector3\n"), odom.rfind("MSG: geometry_msgs/Vector3\n"));
  EXPECT_THROW(ros::schema_text("std_msgs/msg/String"), Error);
}

class McapWriterTest : public test::TempDirTest {};

struct Walked {
  std::string file;
  test::McapRecords r;
};
Walked walk(const std::string& path) {
  Walked w{test::read_bytes(path), {}};
  w.r = test::walk_mcap_records(w.file, 8, true);
  return w;
}

TEST_F(McapWriterTest, RecordFramingOffsetsAndCrcs) {
  const std::string path = this->path("a.mcap");
  {
    mcap::Writer w(path, {.profile = "ros2", .library = "t", .zstd_level = 0});
    EXPECT_EQ(w.add_schema("pkg/msg/T", "ros2msg", "int32 a\n"), 1);
    EXPECT_EQ(w.add_channel(1, "/a", "cdr"), 1);
    w.write(1, 10, "xy");
    w.write(1, 20, "z");
    w.finish();
  }
  const Walked w = walk(path);
  ASSERT_TRUE(w.r.ok) << w.r.error;
  std::vector<int> ops;
  for (const auto& r : w.r.records) ops.push_back(r.op);
  // Header, Schema, Channel, Chunk, MessageIndex, DataEnd | Schema, Channel, Statistics,
  // ChunkIndex | 4 SummaryOffsets | Footer.
  EXPECT_EQ(ops, (std::vector<int>{1, 3, 4, 6, 7, 15, 3, 4, 11, 8, 14, 14, 14, 14, 2}));
  ASSERT_EQ(ops.size(), 15u);
  const auto& rec = w.r.records;
  size_t at = 0;
  EXPECT_EQ(test::mcap_string(rec[0].content, at), "ros2");
  EXPECT_EQ(test::mcap_string(rec[0].content, at), "t");
  // Schema: id 1, name, encoding, uint32-length data.
  EXPECT_EQ(rec[1].content, bytes({1, 0, 9, 0, 0, 0}) + "pkg/msg/T" + bytes({7, 0, 0, 0}) +
                                "ros2msg" + bytes({8, 0, 0, 0}) + "int32 a\n");
  EXPECT_EQ(rec[2].content, bytes({1, 0, 1, 0, 2, 0, 0, 0}) + "/a" + bytes({3, 0, 0, 0}) + "cdr" +
                                bytes({0, 0, 0, 0}));
  // The chunk, uncompressed: times, sizes, CRC and its two Message records.
  const std::string& chunk = rec[3].content;
  EXPECT_EQ(le<uint64_t>(chunk, 0), 10u);
  EXPECT_EQ(le<uint64_t>(chunk, 8), 20u);
  const uint64_t size = le<uint64_t>(chunk, 16);
  at = 28;
  EXPECT_EQ(test::mcap_string(chunk, at), "");
  EXPECT_EQ(le<uint64_t>(chunk, at), size);
  const std::string records = chunk.substr(at + 8);
  ASSERT_EQ(records.size(), size);
  EXPECT_EQ(le<uint32_t>(chunk, 24),
            crc32(0, reinterpret_cast<const Bytef*>(records.data()), records.size()));
  const auto messages = test::walk_mcap_records(records, 0, false);
  ASSERT_TRUE(messages.ok) << messages.error;
  ASSERT_EQ(messages.records.size(), 2u);
  EXPECT_EQ(messages.records[1].content,
            bytes({1, 0, 1, 0, 0, 0, 20, 0, 0, 0, 0, 0, 0, 0, 20, 0, 0, 0, 0, 0, 0, 0}) + "z");
  // MessageIndex: channel 1, (time, offset in the records) pairs that point at the messages.
  const std::string& index = rec[4].content;
  EXPECT_EQ(le<uint16_t>(index, 0), 1);
  EXPECT_EQ(le<uint32_t>(index, 2), 32u);
  EXPECT_EQ(le<uint64_t>(index, 6), 10u);
  EXPECT_EQ(le<uint64_t>(index, 14), messages.records[0].offset);
  EXPECT_EQ(le<uint64_t>(index, 22), 20u);
  EXPECT_EQ(le<uint64_t>(index, 30), messages.records[1].offset);
  // DataEnd: the CRC of everything before it, magic included.
  EXPECT_EQ(le<uint32_t>(rec[5].content, 0),
            crc32(0, reinterpret_cast<const Bytef*>(w.file.data()), rec[5].offset));
  // Statistics: 2 messages, 1 schema, 1 channel, 0, 0, 1 chunk, times 10..20, {1: 2}.
  EXPECT_EQ(rec[8].content, bytes({2, 0, 0, 0, 0,  0, 0, 0,  1, 0, 1, 0, 0, 0, 0, 0,  0, 0, 0,
                                   0, 0, 0, 1, 0,  0, 0, 10, 0, 0, 0, 0, 0, 0, 0, 20, 0, 0, 0,
                                   0, 0, 0, 0, 10, 0, 0, 0,  1, 0, 2, 0, 0, 0, 0, 0,  0, 0}));
  // ChunkIndex: where the chunk and its index are.
  const std::string& ci = rec[9].content;
  EXPECT_EQ(le<uint64_t>(ci, 16), rec[3].offset);
  EXPECT_EQ(le<uint64_t>(ci, 24), rec[4].offset - rec[3].offset);
  EXPECT_EQ(le<uint32_t>(ci, 32), 10u);  // one (channel, offset) entry
  EXPECT_EQ(le<uint16_t>(ci, 36), 1);
  EXPECT_EQ(le<uint64_t>(ci, 38), rec[4].offset);
  EXPECT_EQ(le<uint64_t>(ci, 46), rec[5].offset - rec[4].offset);
  // SummaryOffsets: one per group, in order.
  const std::pair<int, std::pair<size_t, size_t>> groups[] = {
      {3, {6, 7}}, {4, {7, 8}}, {11, {8, 9}}, {8, {9, 10}}};
  for (size_t g = 0; g < 4; ++g) {
    const std::string& so = rec[10 + g].content;
    EXPECT_EQ(static_cast<uint8_t>(so[0]), groups[g].first);
    EXPECT_EQ(le<uint64_t>(so, 1), rec[groups[g].second.first].offset);
    EXPECT_EQ(le<uint64_t>(so, 9),
              rec[groups[g].second.second].offset - rec[groups[g].second.first].offset);
  }
  // Footer: summary start, summary offsets start, CRC of both sections and its own first fields.
  const std::string& footer = rec[14].content;
  EXPECT_EQ(le<uint64_t>(footer, 0), rec[6].offset);
  EXPECT_EQ(le<uint64_t>(footer, 8), rec[10].offset);
  EXPECT_EQ(le<uint32_t>(footer, 16),
            crc32(0, reinterpret_cast<const Bytef*>(w.file.data() + rec[6].offset),
                  rec[14].offset + 9 + 16 - rec[6].offset));
}

TEST_F(McapWriterTest, ZstdChunksHoldTheSameRecords) {
  const std::string plain = path("plain.mcap"), packed = path("zstd.mcap");
  for (const auto& [file, level] : {std::pair{plain, 0}, std::pair{packed, 3}}) {
    mcap::Writer w(file, {.zstd_level = level});
    w.add_channel(w.add_schema("pkg/msg/T", "ros2msg", "int32 a\n"), "/a", "cdr");
    for (int i = 0; i < 100; ++i) w.write(1, 5, std::string(100, static_cast<char>('a' + i % 3)));
    w.finish();
  }
  const Walked a = walk(plain), b = walk(packed);
  ASSERT_TRUE(a.r.ok && b.r.ok);
  auto chunk_of = [](const Walked& w) {
    for (const auto& r : w.r.records)
      if (r.op == 6) return r.content;
    return std::string();
  };
  const std::string ca = chunk_of(a), cb = chunk_of(b);
  size_t at = 28;
  EXPECT_EQ(test::mcap_string(cb, at), "zstd");
  const uint64_t n = le<uint64_t>(cb, at);
  const uint64_t size = le<uint64_t>(cb, 16);
  EXPECT_LT(n, size / 10);
  std::string out(size, '\0');
  EXPECT_EQ(ZSTD_decompress(out.data(), out.size(), cb.data() + at + 8, n), size);
  EXPECT_TRUE(out == ca.substr(40));  // after times, sizes, CRC, "" and the length
  EXPECT_EQ(le<uint32_t>(cb, 24), le<uint32_t>(ca, 24));  // CRC of the uncompressed records
}

TEST_F(McapWriterTest, ChunksCloseAtTheBoundsButKeepOneTimeTogether) {
  const std::string file = path("c.mcap");
  {
    mcap::Writer w(file, {.chunk_bytes = 1000, .chunk_ns = 100, .zstd_level = 0});
    w.add_channel(w.add_schema("pkg/msg/T", "ros2msg", "int32 a\n"), "/a", "cdr");
    for (uint64_t t : {0, 50, 100, 120}) w.write(1, t, "m");  // time bound: [0, 50], [100, 120]
    for (int i = 0; i < 3; ++i) w.write(1, 130, std::string(600, 'x'));  // one time: one chunk
    w.write(1, 131, "m");  // over 1000 bytes: a new chunk
    w.finish();
    EXPECT_EQ(w.chunks(), 3);
    EXPECT_EQ(w.messages(), 8);
  }
  const Walked w = walk(file);
  ASSERT_TRUE(w.r.ok);
  std::vector<std::pair<uint64_t, uint64_t>> times;
  for (const auto& r : w.r.records)
    if (r.op == 6) times.emplace_back(le<uint64_t>(r.content, 0), le<uint64_t>(r.content, 8));
  EXPECT_EQ(times, (std::vector<std::pair<uint64_t, uint64_t>>{{0, 50}, {100, 130}, {131, 131}}));
}

TEST_F(McapWriterTest, AWriterNeverFinishedKeepsEveryChunk) {
  const std::string file = path("cut.mcap");
  {
    mcap::Writer w(file, {.chunk_ns = 10, .zstd_level = 0});
    w.add_channel(w.add_schema("pkg/msg/T", "ros2msg", "int32 a\n"), "/a", "cdr");
    for (uint64_t t = 0; t < 50; t += 5) w.write(1, t, "m");
  }  // destroyed: the open chunk written, no summary
  const Walked w = walk(file);
  EXPECT_FALSE(w.r.ok);
  int chunks = 0;
  for (const auto& r : w.r.records) chunks += r.op == 6;
  EXPECT_EQ(chunks, 5);
  EXPECT_EQ(w.r.records.back().op, 7);  // the last chunk's message index, whole
}

TEST(McapExport, NamedOnlyAndAmongTheRunOutputs) {
  const auto all = parse_export_list("all");
  EXPECT_EQ(std::find(all.begin(), all.end(), "mcap"), all.end());  // not in "all"
  EXPECT_EQ(parse_export_list("all,mcap").back(), "mcap");
  const auto& names = run_output_names();
  EXPECT_NE(std::find(names.begin(), names.end(), "result.mcap"), names.end());
}

// Frames whose camera is not finite are left out and counted; the rest are written.
TEST_F(McapWriterTest, SinkSkipsNonFiniteCamerasAndSaysSo) {
  const std::string file = path("s.mcap");
  auto sink = make_mcap_sink(file);
  const Tensor rgb = test::make_rgb_u8(1);
  FrameResult bad = test::make_frame(1);
  bad.c2w[3] = std::numeric_limits<float>::infinity();
  sink->add(test::make_frame(0), &rgb);
  sink->add(bad, &rgb);
  sink->add(test::make_frame(2), nullptr);
  sink->finish();
  EXPECT_EQ(sink->notes(), "mcap: skipped 1 frame with non-finite cameras");
  const Walked w = walk(file);
  ASSERT_TRUE(w.r.ok) << w.r.error;
  std::map<uint16_t, uint64_t> counts;
  for (const auto& r : w.r.records)
    if (r.op == 11) {
      const std::string& s = r.content;
      EXPECT_EQ(le<uint64_t>(s, 0), 2u * 5 + 1 + 2 + 2);  // 5 a frame, 1 image, 2 clouds, 2 paths
      const size_t end = 46 + le<uint32_t>(s, 42);
      for (size_t at = 46; at + 10 <= end; at += 10)
        counts[le<uint16_t>(s, at)] = le<uint64_t>(s, at + 2);
    }
  // /tf, odometry, path, camera_info, depth, confidence, image, points.
  EXPECT_EQ(counts, (std::map<uint16_t, uint64_t>{
                        {1, 2}, {2, 2}, {3, 2}, {4, 2}, {5, 2}, {6, 2}, {7, 1}, {8, 2}}));
}

}  // namespace
}  // namespace lingbot
