// Binary PLY point cloud, grown frame by frame. The vertex count sits in the header as a
// fixed-width number that is rewritten after each frame's points are on disk, so the file is
// a valid PLY of the frames so far at any moment, including after the process is killed.
#include <bit>
#include <cstring>

#include "io/sinks/sink.h"
#include "io/sinks/sink_util.h"

namespace lingbot {
namespace {

constexpr int kCountWidth = 10;  // room for 9,999,999,999 points
constexpr size_t kVertexBytes = 3 * 4 + 3 + 4;

void put_f32(std::string& out, float v) {
  uint32_t u = std::bit_cast<uint32_t>(v);
  for (int b = 0; b < 4; ++b) out.push_back(static_cast<char>((u >> (8 * b)) & 0xff));
}

std::string count_field(int64_t n) {
  char buf[24];
  // Leading zeros keep the width fixed; PLY readers parse the count as a decimal integer.
  std::snprintf(buf, sizeof buf, "%0*lld", kCountWidth, static_cast<long long>(n));
  return buf;
}

class PlySink : public ResultSink {
 public:
  std::string name() const override { return "ply"; }
  PlySink(const std::string& path, PointOptions o) : file_(path, true), o_(o) {
    LINGBOT_CHECK(o_.stride >= 1, "the point stride must be at least 1");
    std::string header =
        "ply\nformat binary_little_endian 1.0\n"
        "comment lingbot-map points: world coordinates, confidence > " +
        sinks::fmt(o_.conf_threshold) + ", pixel stride " + std::to_string(o_.stride) +
        (o_.voxel > 0 ? ", one per voxel of " + sinks::fmt(o_.voxel) + " x the first median depth"
                      : std::string()) +
        "\nelement vertex ";
    count_offset_ = static_cast<int64_t>(header.size());
    header += count_field(0) +
              "\nproperty float x\nproperty float y\nproperty float z\n"
              "property uchar red\nproperty uchar green\nproperty uchar blue\n"
              "property float confidence\nend_header\n";
    header_bytes_ = static_cast<int64_t>(header.size());
    file_.write(header);
    file_.flush();
  }

  void add(const FrameResult& r, const Tensor* rgb) override {
    sinks::check_result(r);
    if (!sinks::finite_pose(r)) {  // no point of the frame can be placed
      ++skipped_.frames;
      return;
    }
    buf_.clear();
    int64_t n = 0;
    voxels_.start_frame(r);
    skipped_.points += sinks::for_each_point(r, rgb, o_, [&](const sinks::Point& p) {
      if (!voxels_.keep(p)) return;
      put_f32(buf_, p.x);
      put_f32(buf_, p.y);
      put_f32(buf_, p.z);
      for (uint8_t c : p.rgb) buf_.push_back(static_cast<char>(c));
      put_f32(buf_, p.confidence);
      ++n;
    });
    if (n == 0) return;
    // Points first, count second: a crash in between leaves surplus bytes after the last
    // counted vertex, which readers ignore, never a count promising points that are missing.
    file_.write(buf_);
    file_.flush();
    points_ += n;
    LINGBOT_CHECK(points_ < 10'000'000'000,
                  "cannot write " + file_.path() + ": more points than the header has room for");
    file_.write_at(count_offset_, count_field(points_));
    file_.flush();
  }

  std::string notes() const override { return skipped_.note(name()); }
  void finish() override {
    file_.truncate(header_bytes_ + points_ * static_cast<int64_t>(kVertexBytes));
    file_.close();
  }

 private:
  sinks::OutFile file_;
  PointOptions o_;
  sinks::VoxelFilter voxels_{o_};
  sinks::Skipped skipped_;
  int64_t count_offset_ = 0, header_bytes_ = 0, points_ = 0;
  std::string buf_;
};

}  // namespace

std::unique_ptr<ResultSink> make_ply_sink(const std::string& path, PointOptions options) {
  return std::make_unique<PlySink>(path, options);
}

}  // namespace lingbot
