// What the sinks share: files that report failures as Errors, number formatting, rotations and
// the viewer's unprojection.
#pragma once

#include <array>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "io/sinks/sink.h"
#include "lingbot/error.h"

namespace lingbot::sinks {

void make_folder(const std::string& dir);  // with parents; Error when impossible

// A file written in pieces. Every failure (cannot open, disk full) throws Error naming it.
class OutFile {
 public:
  OutFile(const std::string& path, bool binary);
  ~OutFile();
  OutFile(const OutFile&) = delete;
  OutFile& operator=(const OutFile&) = delete;

  void write(std::string_view bytes);
  void write_at(int64_t offset, std::string_view bytes);  // then back to the end
  void truncate(int64_t size);                            // and continue at the end
  // Hands what was written to the OS, so that it survives the process being killed.
  void flush();
  void close();
  int64_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  [[noreturn]] void fail() const;
  std::string path_;
  std::FILE* f_ = nullptr;
  int64_t size_ = 0;
};

// Writes `path` whole into a temporary beside it, then renames it over `path`: readers, and a
// run killed meanwhile, only ever see the previous file or the complete new one.
void replace_file(const std::string& path, const std::function<void(OutFile&)>& write);

// Shortest text that reads back as the same float / double ("0.1", "3", "1e-07").
std::string fmt(float v);
std::string fmt(double v);

// Unit quaternion (x, y, z, w), w >= 0, of the rotation part of a row-major 3x4 [R | t].
std::array<double, 4> rotation_to_quaternion(const std::array<float, 12>& m);

// Colours of frame pixels; grey when the frame is not known.
class PixelColours {
 public:
  PixelColours(const Tensor* rgb, const FrameResult& r);
  std::array<uint8_t, 3> at(int64_t pixel) const;

 private:
  const Tensor* rgb_;
  int64_t plane_;
};

struct Point {
  float x, y, z, confidence;
  std::array<uint8_t, 3> rgb;
  int u, v;  // the pixel it came from
};

// Whether a frame's camera can be written: pose, c2w, w2c and intrinsics finite, focal lengths
// positive. A model can emit inf or NaN (a diverging run, a bad checkpoint); formats such as
// COLMAP, nerfstudio and glTF cannot hold them, so their writers skip such frames.
bool finite_camera(const FrameResult& r);
// Whether a frame's pose (pose_enc's translation and rotation, c2w, w2c) is finite: the point
// formats (PLY, glTF) need no more, as an infinite focal length still places points (on the
// optical axis) and draws a frustum, while a non-finite pose places nothing.
bool finite_pose(const FrameResult& r);

// What an export left out because its format cannot hold non-finite values, for the run's
// report: "ply: skipped 2 frames with non-finite cameras and 40 points with non-finite values".
struct Skipped {
  int64_t frames = 0, points = 0;
  std::string note(const std::string& format) const;
};

// The world points of a frame as the reference viewer builds them: for pixel (u, v) with depth
// d, X_cam = ((u - cx) d / fx, (v - cy) d / fy, d) in double, X_world = R X_cam + t stored as
// float; kept when confidence > threshold, on the stride grid, and finite (position and
// confidence). Returns how many points above the threshold were dropped as non-finite.
template <class F>
int64_t for_each_point(const FrameResult& r, const Tensor* rgb, const PointOptions& o, F&& emit) {
  LINGBOT_CHECK(o.stride >= 1, "the point stride must be at least 1");
  const PixelColours colours(rgb, r);
  const double fx = r.intrinsics[0], cx = r.intrinsics[2], fy = r.intrinsics[4],
               cy = r.intrinsics[5];
  const auto& m = r.c2w;
  int64_t non_finite = 0;
  for (int v = 0; v < r.height; v += o.stride)
    for (int u = 0; u < r.width; u += o.stride) {
      const int64_t i = static_cast<int64_t>(v) * r.width + u;
      const float conf = r.confidence[i];
      if (!(conf > o.conf_threshold)) continue;
      const double d = r.depth[i];
      const double xc = (u - cx) * d / fx, yc = (v - cy) * d / fy, zc = d;
      Point p;
      p.x = static_cast<float>(m[0] * xc + m[1] * yc + m[2] * zc + m[3]);
      p.y = static_cast<float>(m[4] * xc + m[5] * yc + m[6] * zc + m[7]);
      p.z = static_cast<float>(m[8] * xc + m[9] * yc + m[10] * zc + m[11]);
      if (!std::isfinite(p.x) || !std::isfinite(p.y) || !std::isfinite(p.z) ||
          !std::isfinite(conf)) {
        ++non_finite;
        continue;
      }
      p.confidence = conf;
      p.rgb = colours.at(i);
      p.u = u;
      p.v = v;
      emit(p);
    }
  return non_finite;
}

// Median of the finite positive depths on the stride grid; 0 when there is none.
float typical_depth(const FrameResult& r, int stride);

// PointOptions::voxel for one export: keep(p) is true for the first point in each cube. The edge
// is fixed by the first frame whose typical depth is known (its points before that are all
// kept). The cubes seen are a set-associative table of buckets x 8 keys that grows fourfold
// while half full, up to `max_buckets`; there a full bucket replaces its oldest key. Its memory
// is so bounded by bytes(max_buckets), and it is exact until a bucket at the bound overflows.
class VoxelFilter {
 public:
  static constexpr int64_t kMaxBuckets = int64_t{1} << 19;
  static constexpr size_t bytes(int64_t buckets = kMaxBuckets) {
    return static_cast<size_t>(buckets) * (8 * sizeof(uint64_t) + 1);
  }
  explicit VoxelFilter(const PointOptions& o, int64_t max_buckets = kMaxBuckets);
  void start_frame(const FrameResult& r);  // before the frame's points
  bool keep(const Point& p);

 private:
  bool insert(uint64_t key);  // false when present
  void grow();

  float voxel_ = 0, edge_ = 0;
  int stride_ = 1;
  int64_t max_buckets_ = 0, buckets_ = 0, stored_ = 0;
  std::vector<uint64_t> keys_;   // 8 per bucket; 0 = empty
  std::vector<uint8_t> oldest_;  // per bucket at the bound: the slot to replace next
};

// Checks that depth and confidence hold height * width values.
void check_result(const FrameResult& r);

}  // namespace lingbot::sinks
