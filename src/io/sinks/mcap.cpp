// The run as a ROS 2 bag in MCAP (io/mcap/writer.h), CDR-encoded messages with their ros2msg
// schemas (io/mcap/ros_messages.h), written frame by frame. Frames follow REP 103/105: `map` is
// the model's world (the first camera's frame) turned to x forward, y left, z up, the camera's
// pose in it is `lingbot_camera` (the same axes), and the model's camera axes (x right, y down,
// z forward) are `lingbot_camera_optical`, which the depth, confidence and image messages use.
#include <cmath>
#include <utility>

#include "io/image_codec.h"
#include "io/mcap/ros_messages.h"
#include "io/mcap/writer.h"
#include "io/sinks/sink.h"
#include "io/sinks/sink_util.h"

namespace lingbot {
namespace {

namespace ros = mcap::ros;

// Optical axes to body axes: body x = optical z, body y = -optical x, body z = -optical y.
constexpr int kAxis[3] = {2, 0, 1};
constexpr float kSign[3] = {1, -1, -1};

// A world (optical-axes) point in `map`.
std::array<float, 3> to_map(float x, float y, float z) {
  const float p[3] = {x, y, z};
  return {kSign[0] * p[kAxis[0]], kSign[1] * p[kAxis[1]], kSign[2] * p[kAxis[2]]};
}

ros::Pose pose_of(const std::array<float, 12>& m) {
  const auto q = sinks::rotation_to_quaternion(m);
  return {{m[3], m[7], m[11]}, {q[0], q[1], q[2], q[3]}};
}

// The camera's pose in `map`: c2w conjugated by the axis change (exact: signs and a permutation).
ros::Pose camera_in_map(const std::array<float, 12>& c2w) {
  std::array<float, 12> m{};
  for (int i = 0; i < 3; ++i) {
    for (int j = 0; j < 3; ++j) m[i * 4 + j] = kSign[i] * kSign[j] * c2w[kAxis[i] * 4 + kAxis[j]];
    m[i * 4 + 3] = kSign[i] * c2w[kAxis[i] * 4 + 3];
  }
  return pose_of(m);
}

// lingbot_camera -> lingbot_camera_optical: the optical axes in body coordinates.
ros::Pose optical_in_camera() {
  std::array<float, 12> m{};
  for (int i = 0; i < 3; ++i) m[i * 4 + kAxis[i]] = kSign[i];
  return pose_of(m);
}

class McapSink : public ResultSink {
 public:
  std::string name() const override { return "mcap"; }
  McapSink(const std::string& path, McapOptions o) : writer_(path), o_(std::move(o)) {
    LINGBOT_CHECK(o_.frame_rate > 0 && std::isfinite(o_.frame_rate),
                  "MCAP export: the frame rate must be positive");
    auto channel = [&](const char* topic, const char* type) {
      return writer_.add_channel(writer_.add_schema(type, "ros2msg", ros::schema_text(type)), topic,
                                 "cdr");
    };
    tf_ = channel("/tf", "tf2_msgs/msg/TFMessage");
    odometry_ = channel("/lingbot/odometry", "nav_msgs/msg/Odometry");
    path_ = channel("/lingbot/path", "nav_msgs/msg/Path");
    camera_info_ = channel("/lingbot/camera_info", "sensor_msgs/msg/CameraInfo");
    // Two channels of one schema: the schema once.
    const uint16_t image_schema = writer_.add_schema("sensor_msgs/msg/Image", "ros2msg",
                                                     ros::schema_text("sensor_msgs/Image"));
    depth_ = writer_.add_channel(image_schema, "/lingbot/depth", "cdr");
    confidence_ = writer_.add_channel(image_schema, "/lingbot/confidence", "cdr");
    image_ = channel("/lingbot/image", "sensor_msgs/msg/CompressedImage");
    points_ = channel("/lingbot/points", "sensor_msgs/msg/PointCloud2");
  }

  void add(const FrameResult& r, const Tensor* rgb) override {
    sinks::check_result(r);
    // tf2 refuses non-finite transforms, so such a frame is left out whole; an infinite focal
    // length (synthetic weights) is kept, as CameraInfo's float64 holds it and the points
    // still land on the optical axis, as in the PLY export.
    if (!sinks::finite_pose(r)) {
      ++skipped_.frames;
      return;
    }
    const uint64_t t = stamp(r.index);
    const ros::Time time = ros::to_time(t);
    const ros::Header map{time, "map"}, optical{time, kOptical};
    const ros::Pose camera = camera_in_map(r.c2w);
    writer_.write(
        tf_, t, ros::tf_message({{map, kCamera, camera}, {{time, kCamera}, kOptical, kOptical_}}));
    writer_.write(odometry_, t, ros::odometry(map, kCamera, camera));
    poses_.push_back({time, camera});
    if (path_due(t)) publish_path(t);
    std::array<double, 9> k;
    for (int i = 0; i < 9; ++i) k[i] = r.intrinsics[i];
    const auto w = static_cast<uint32_t>(r.width), h = static_cast<uint32_t>(r.height);
    writer_.write(camera_info_, t, ros::camera_info(optical, w, h, k));
    writer_.write(depth_, t, ros::image_32fc1(optical, w, h, r.depth.data()));
    writer_.write(confidence_, t, ros::image_32fc1(optical, w, h, r.confidence.data()));
    if (rgb) {
      const sinks::PixelColours colours(rgb, r);
      ImageU8 img{r.width, r.height, std::vector<uint8_t>(static_cast<size_t>(w) * h * 3)};
      for (int64_t i = 0; i < static_cast<int64_t>(w) * h; ++i) {
        const auto c = colours.at(i);
        for (int j = 0; j < 3; ++j) img.rgb[i * 3 + j] = c[j];
      }
      const std::vector<uint8_t> jpeg = codec::encode_jpeg(img, kJpegQuality);
      writer_.write(
          image_, t,
          ros::compressed_image(optical, "jpeg",
                                {reinterpret_cast<const char*>(jpeg.data()), jpeg.size()}));
    }
    if (r.keyframe) {
      cloud_.clear();
      voxels_.start_frame(r);
      skipped_.points += sinks::for_each_point(r, rgb, o_.points, [&](const sinks::Point& p) {
        if (!voxels_.keep(p)) return;
        const auto m = to_map(p.x, p.y, p.z);
        cloud_.push_back({m[0], m[1], m[2], p.rgb[0], p.rgb[1], p.rgb[2], p.confidence});
      });
      writer_.write(points_, t, ros::point_cloud(map, cloud_));
    }
  }

  void finish() override {
    if (published_ < poses_.size()) publish_path(last_stamp_);
    writer_.finish();
  }
  std::string notes() const override { return skipped_.note(name()); }

 private:
  static constexpr const char* kCamera = "lingbot_camera";
  static constexpr const char* kOptical = "lingbot_camera_optical";
  static constexpr int kJpegQuality = 90;
  const ros::Pose kOptical_ = optical_in_camera();

  uint64_t stamp(int64_t index) {
    double s = o_.timestamp ? o_.timestamp(index) : NAN;
    if (!std::isfinite(s)) s = static_cast<double>(index) / o_.frame_rate;
    const uint64_t t = static_cast<uint64_t>(std::llround(std::clamp(s, 0.0, 9.2e9) * 1e9));
    last_stamp_ = std::max(last_stamp_, t);
    return t;
  }
  // The path grows with the run, so it goes out at most once a second of stream time and, on
  // long runs, only after 1/32 more poses: its messages sum to about 32 times the final path
  // (72 bytes a pose) rather than growing with the square of the frame count.
  bool path_due(uint64_t t) const {
    if (published_ == 0) return true;
    return t >= last_path_ + 1'000'000'000 && poses_.size() - published_ >= poses_.size() / 32;
  }
  void publish_path(uint64_t t) {
    writer_.write(path_, t, ros::path({ros::to_time(t), "map"}, poses_));
    published_ = poses_.size();
    last_path_ = t;
  }

  mcap::Writer writer_;
  McapOptions o_;
  uint16_t tf_, odometry_, path_, camera_info_, depth_, confidence_, image_, points_;
  std::vector<ros::StampedPose> poses_;
  size_t published_ = 0;
  uint64_t last_path_ = 0, last_stamp_ = 0;
  sinks::VoxelFilter voxels_{o_.points};
  std::vector<ros::CloudPoint> cloud_;
  sinks::Skipped skipped_;
};

}  // namespace

std::unique_ptr<ResultSink> make_mcap_sink(const std::string& path, McapOptions options) {
  return std::make_unique<McapSink>(path, std::move(options));
}

}  // namespace lingbot
