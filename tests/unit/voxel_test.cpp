// PointOptions::voxel: the point exports keep the first point of each cube of a grid whose edge
// is a fraction of the first frame's median depth, so that revisited space adds no points; every
// export keeps the same ones.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <set>
#include <tuple>

#include "io/sinks/sink_util.h"
#include "lingbot/error.h"
#include "lingbot/exports.h"
#include "sinks_test_util.h"
#include "test_util.h"

namespace lingbot {
namespace {

using Voxel = test::TempDirTest;
using Cube = std::tuple<int64_t, int64_t, int64_t>;

// The median depth over every pixel (stride 1), written out independently of the filter.
double median_depth(const FrameResult& r) {
  std::vector<float> d(r.depth.begin(), r.depth.end());
  std::nth_element(d.begin(), d.begin() + d.size() / 2, d.end());
  return d[d.size() / 2];
}

TEST(VoxelFilter, KeepsTheFirstPointOfEachCube) {
  const PointOptions o{.conf_threshold = 0, .stride = 1, .voxel = 0.2f};
  const FrameResult a = test::make_frame(0), b = test::make_frame(1);
  const float edge = 0.2f * float(median_depth(a));
  sinks::VoxelFilter filter(o);
  std::set<Cube> seen;
  std::vector<int64_t> kept;
  for (const FrameResult* f : {&a, &b, &a}) {
    filter.start_frame(*f);  // the edge stays the first frame's
    kept.push_back(0);
    sinks::for_each_point(*f, nullptr, o, [&](const sinks::Point& p) {
      auto cube = [&](float x) { return int64_t(std::floor(double(x) / double(edge))); };
      const bool fresh = seen.insert({cube(p.x), cube(p.y), cube(p.z)}).second;
      ASSERT_EQ(filter.keep(p), fresh) << p.x << " " << p.y << " " << p.z;
      kept.back() += fresh;
    });
  }
  // Nearby pixels share cubes, the next frame adds some, the frame seen again none.
  EXPECT_GT(kept[0], 0);
  EXPECT_LT(kept[0], test::kH * test::kW / 2);
  EXPECT_GT(kept[1], 0);
  EXPECT_EQ(kept[2], 0);
}

TEST(VoxelFilter, OffKeepsEveryPoint) {
  sinks::VoxelFilter filter(PointOptions{});
  const FrameResult f = test::make_frame(0);
  filter.start_frame(f);
  int64_t n = 0;
  for (int i = 0; i < 2; ++i)
    sinks::for_each_point(f, nullptr, {.conf_threshold = 0, .stride = 1},
                          [&](const sinks::Point& p) { n += filter.keep(p); });
  EXPECT_EQ(n, 2 * test::kH * test::kW);
  EXPECT_THROW(sinks::VoxelFilter({.voxel = -1}), Error);
  EXPECT_THROW(sinks::VoxelFilter({.voxel = NAN}), Error);
}

// The table is fixed: a full bucket forgets its oldest cube, which may then take a point again.
TEST(VoxelFilter, AFullBucketForgetsItsOldestCube) {
  FrameResult f = test::make_frame(0);
  std::fill(f.depth.begin(), f.depth.end(), 1.0f);  // edge 1 x 1.0
  sinks::VoxelFilter filter({.voxel = 1}, /*buckets=*/1);
  filter.start_frame(f);
  auto point = [](float x) { return sinks::Point{x + 0.5f, 0.5f, 0.5f, 2, {}, 0, 0}; };
  for (int i = 0; i < 9; ++i) EXPECT_TRUE(filter.keep(point(float(i)))) << i;
  EXPECT_FALSE(filter.keep(point(8)));  // remembered
  EXPECT_TRUE(filter.keep(point(0)));   // forgotten for cube 8
  EXPECT_FALSE(filter.keep(point(0)));
  // The memory the preflight counts.
  EXPECT_EQ(sinks::VoxelFilter::bytes(), size_t(1 << 19) * 65);
}

// Below its bound the table grows and stays exact: 200,000 cubes (past the first table's 32,768
// keys, through two growths) are all kept once, and none twice.
TEST(VoxelFilter, GrowsExactlyUpToItsBound) {
  FrameResult f = test::make_frame(0);
  std::fill(f.depth.begin(), f.depth.end(), 1.0f);
  sinks::VoxelFilter filter({.voxel = 1});
  filter.start_frame(f);
  auto point = [](int i) {
    return sinks::Point{
        float(i % 100) + 0.5f, float(i / 100 % 100) + 0.5f, float(i / 10000) - 9.5f, 2, {}, 0, 0};
  };
  int64_t kept = 0;
  for (int pass = 0; pass < 2; ++pass)
    for (int i = 0; i < 200000; ++i) kept += filter.keep(point(i));
  EXPECT_EQ(kept, 200000);
}

TEST_F(Voxel, PlyGlbAndColmapKeepTheSamePoints) {
  const PointOptions o{.conf_threshold = 1.2f, .stride = 1, .voxel = 0.1f};
  auto ply = make_ply_sink(path("p.ply"), o);
  auto glb = make_glb_sink(path("p.glb"), o);
  auto colmap = make_colmap_sink(path("colmap"), o);
  auto all = make_ply_sink(path("all.ply"), {.conf_threshold = 1.2f, .stride = 1});
  const Tensor rgb = test::make_rgb_u8(3);
  for (int i : {0, 1, 0, 1}) {
    const FrameResult f = test::make_frame(i);
    for (ResultSink* s : {ply.get(), glb.get(), colmap.get(), all.get()}) s->add(f, &rgb);
  }
  for (ResultSink* s : {ply.get(), glb.get(), colmap.get(), all.get()}) s->finish();
  const auto cloud = test::read_ply(path("p.ply")), every = test::read_ply(path("all.ply"));
  ASSERT_TRUE(cloud.ok);
  ASSERT_TRUE(every.ok);
  EXPECT_GT(cloud.count, 0);
  EXPECT_LT(cloud.count, every.count / 2);  // the frames seen twice add nothing
  EXPECT_NE(std::find_if(cloud.header.begin(), cloud.header.end(),
                         [](const std::string& l) { return l.find("voxel of 0.1") != l.npos; }),
            cloud.header.end());
  const auto g = test::read_glb(path("p.glb"));
  ASSERT_TRUE(g.ok()) << g.error;
  const int pos = g.json["meshes"][0]["primitives"][0]["attributes"]["POSITION"];
  const std::vector<float> xyz = g.floats(pos);
  std::vector<std::vector<double>> colmap_points;
  for (const std::string& line : test::read_lines(path("colmap/points3D.txt")))
    if (!line.empty() && line[0] != '#') colmap_points.push_back(test::numbers(line));
  ASSERT_EQ(xyz.size(), cloud.vertices.size() * 3);
  ASSERT_EQ(colmap_points.size(), cloud.vertices.size());
  for (size_t i = 0; i < cloud.vertices.size(); ++i) {
    const auto& v = cloud.vertices[i];
    EXPECT_EQ(xyz[3 * i], v.x);
    EXPECT_EQ(xyz[3 * i + 2], v.z);
    EXPECT_EQ(float(colmap_points[i][1]), v.x);
    EXPECT_EQ(float(colmap_points[i][3]), v.z);
  }
}

}  // namespace
}  // namespace lingbot
