// The ROS 2 messages the MCAP export writes: their definitions (ros2msg text, as rosbag2 stores
// them, so that a reader needs no ROS installation) and their CDR encoders (io/mcap/cdr.h).
// Field order and types follow the message definitions of ROS 2 (Humble and later).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "io/mcap/cdr.h"

namespace lingbot::mcap::ros {

// The ros2msg schema of a message type ("tf2_msgs/msg/TFMessage"): its own definition, then
// every type it uses, each once, as a line of 80 '=', "MSG: pkg/Type" and its definition. Throws
// Error for a type not in this file's table.
std::string schema_text(std::string_view type);

struct Time {  // builtin_interfaces/Time
  int32_t sec = 0;
  uint32_t nanosec = 0;
};
// Seconds (>= 0, finite) to a ROS time; nanoseconds as a 64-bit count, as MCAP's log times.
Time to_time(uint64_t nanoseconds);

struct Header {  // std_msgs/Header
  Time stamp;
  std::string frame_id;
};

struct Pose {  // geometry_msgs/Pose, also a Transform's translation and rotation
  std::array<double, 3> position{};
  std::array<double, 4> orientation{0, 0, 0, 1};  // x, y, z, w
};

struct TransformStamped {  // geometry_msgs/TransformStamped
  Header header;
  std::string child_frame_id;
  Pose transform;
};

void encode(CdrWriter& w, const Header& h);
// tf2_msgs/TFMessage
std::string tf_message(const std::vector<TransformStamped>& transforms);
// nav_msgs/Odometry with the pose and zero twist and covariances (not estimated).
std::string odometry(const Header& h, const std::string& child_frame_id, const Pose& pose);
// nav_msgs/Path: every pose stamped with its own time in the header's frame.
struct StampedPose {
  Time stamp;
  Pose pose;
};
std::string path(const Header& h, const std::vector<StampedPose>& poses);
// sensor_msgs/CameraInfo of an undistorted pinhole camera (K = 3x3 row-major, R = identity,
// P = [K | 0], distortion model "plumb_bob" with five zeros).
std::string camera_info(const Header& h, uint32_t width, uint32_t height,
                        const std::array<double, 9>& k);
// sensor_msgs/Image, encoding "32FC1", little-endian rows of `width` floats.
std::string image_32fc1(const Header& h, uint32_t width, uint32_t height, const float* data);
// sensor_msgs/CompressedImage: `format` "png" or "jpeg".
std::string compressed_image(const Header& h, std::string_view format, std::string_view data);

// sensor_msgs/PointCloud2 of unordered points (height 1), fields x, y, z (FLOAT32), rgb (FLOAT32
// holding 0x00RRGGBB, PCL's packing, which RViz and Foxglove colour from) and confidence
// (FLOAT32): 20 bytes a point, dense (no NaN).
struct CloudPoint {
  float x, y, z;
  uint8_t r, g, b;
  float confidence;
};
constexpr uint32_t kCloudPointStep = 20;
std::string point_cloud(const Header& h, const std::vector<CloudPoint>& points);

}  // namespace lingbot::mcap::ros
