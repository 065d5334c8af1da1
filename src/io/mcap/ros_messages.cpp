#include "io/mcap/ros_messages.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <functional>
#include <utility>

#include "lingbot/error.h"

namespace lingbot::mcap::ros {
namespace {

// The definitions, fields only (the ROS sources' comments left out), with every type named by
// its package: "pkg/Type" is valid ros2msg in any package and needs no resolution rule.
const std::pair<const char*, const char*> kDefinitions[] = {
    {"builtin_interfaces/Time", "int32 sec\nuint32 nanosec\n"},
    {"std_msgs/Header", "builtin_interfaces/Time stamp\nstring frame_id\n"},
    {"geometry_msgs/Vector3", "float64 x\nfloat64 y\nfloat64 z\n"},
    {"geometry_msgs/Point", "float64 x\nfloat64 y\nfloat64 z\n"},
    {"geometry_msgs/Quaternion", "float64 x 0\nfloat64 y 0\nfloat64 z 0\nfloat64 w 1\n"},
    {"geometry_msgs/Transform",
     "geometry_msgs/Vector3 translation\ngeometry_msgs/Quaternion rotation\n"},
    {"geometry_msgs/TransformStamped",
     "std_msgs/Header header\nstring child_frame_id\ngeometry_msgs/Transform transform\n"},
    {"tf2_msgs/TFMessage", "geometry_msgs/TransformStamped[] transforms\n"},
    {"geometry_msgs/Pose", "geometry_msgs/Point position\ngeometry_msgs/Quaternion orientation\n"},
    {"geometry_msgs/PoseWithCovariance", "geometry_msgs/Pose pose\nfloat64[36] covariance\n"},
    {"geometry_msgs/Twist", "geometry_msgs/Vector3 linear\ngeometry_msgs/Vector3 angular\n"},
    {"geometry_msgs/TwistWithCovariance", "geometry_msgs/Twist twist\nfloat64[36] covariance\n"},
    {"nav_msgs/Odometry",
     "std_msgs/Header header\nstring child_frame_id\ngeometry_msgs/PoseWithCovariance pose\n"
     "geometry_msgs/TwistWithCovariance twist\n"},
    {"geometry_msgs/PoseStamped", "std_msgs/Header header\ngeometry_msgs/Pose pose\n"},
    {"nav_msgs/Path", "std_msgs/Header header\ngeometry_msgs/PoseStamped[] poses\n"},
    {"sensor_msgs/RegionOfInterest",
     "uint32 x_offset\nuint32 y_offset\nuint32 height\nuint32 width\nbool do_rectify\n"},
    {"sensor_msgs/CameraInfo",
     "std_msgs/Header header\nuint32 height\nuint32 width\nstring distortion_model\n"
     "float64[] d\nfloat64[9] k\nfloat64[9] r\nfloat64[12] p\nuint32 binning_x\n"
     "uint32 binning_y\nsensor_msgs/RegionOfInterest roi\n"},
    {"sensor_msgs/Image",
     "std_msgs/Header header\nuint32 height\nuint32 width\nstring encoding\n"
     "uint8 is_bigendian\nuint32 step\nuint8[] data\n"},
    {"sensor_msgs/CompressedImage", "std_msgs/Header header\nstring format\nuint8[] data\n"},
    {"sensor_msgs/PointField",
     "uint8 INT8 = 1\nuint8 UINT8 = 2\nuint8 INT16 = 3\nuint8 UINT16 = 4\nuint8 INT32 = 5\n"
     "uint8 UINT32 = 6\nuint8 FLOAT32 = 7\nuint8 FLOAT64 = 8\n"
     "string name\nuint32 offset\nuint8 datatype\nuint32 count\n"},
    {"sensor_msgs/PointCloud2",
     "std_msgs/Header header\nuint32 height\nuint32 width\nsensor_msgs/PointField[] fields\n"
     "bool is_bigendian\nuint32 point_step\nuint32 row_step\nuint8[] data\nbool is_dense\n"},
};

const char* definition(const std::string& type) {
  for (const auto& [name, text] : kDefinitions)
    if (type == name) return text;
  throw Error("MCAP export: no ROS 2 definition of " + type);
}

// The message types a definition's fields name (the first word of a line, when it holds a '/'),
// in order of appearance.
std::vector<std::string> used_types(const std::string& text) {
  std::vector<std::string> out;
  size_t line = 0;
  while (line < text.size()) {
    size_t end = text.find('\n', line);
    if (end == std::string::npos) end = text.size();
    const std::string word = text.substr(line, text.find_first_of(" \n", line) - line);
    if (word.find('/') != std::string::npos) out.push_back(word.substr(0, word.find('[')));
    line = end + 1;
  }
  return out;
}

}  // namespace

std::string schema_text(std::string_view type) {
  // "pkg/msg/Type" (the name rosbag2 gives a schema) or "pkg/Type".
  std::string top(type);
  if (const size_t at = top.find("/msg/"); at != std::string::npos) top.erase(at, 4);
  std::string out = definition(top);
  std::vector<std::string> done{top};
  // Depth first, each type once: ros2msg readers resolve the blocks by name, in any order.
  std::function<void(const std::string&)> add = [&](const std::string& parent) {
    for (const std::string& t : used_types(definition(parent))) {
      if (std::find(done.begin(), done.end(), t) != done.end()) continue;
      done.push_back(t);
      out += std::string(80, '=') + "\nMSG: " + t + "\n" + definition(t);
      add(t);
    }
  };
  add(top);
  return out;
}

Time to_time(uint64_t ns) {
  return {static_cast<int32_t>(std::min<uint64_t>(ns / 1'000'000'000, INT32_MAX)),
          static_cast<uint32_t>(ns % 1'000'000'000)};
}

void encode(CdrWriter& w, const Header& h) {
  w.i32(h.stamp.sec);
  w.u32(h.stamp.nanosec);
  w.string(h.frame_id);
}

namespace {
void encode_pose(CdrWriter& w, const Pose& p) {
  for (double v : p.position) w.f64(v);
  for (double v : p.orientation) w.f64(v);
}
void zeros(CdrWriter& w, int n) {
  for (int i = 0; i < n; ++i) w.f64(0);
}
}  // namespace

std::string tf_message(const std::vector<TransformStamped>& transforms) {
  CdrWriter w;
  w.sequence(transforms.size());
  for (const TransformStamped& t : transforms) {
    encode(w, t.header);
    w.string(t.child_frame_id);
    encode_pose(w, t.transform);
  }
  return std::move(w.data());
}

std::string odometry(const Header& h, const std::string& child_frame_id, const Pose& pose) {
  CdrWriter w;
  encode(w, h);
  w.string(child_frame_id);
  encode_pose(w, pose);
  zeros(w, 36);     // pose covariance
  zeros(w, 3 + 3);  // twist: linear, angular
  zeros(w, 36);     // twist covariance
  return std::move(w.data());
}

std::string path(const Header& h, const std::vector<StampedPose>& poses) {
  CdrWriter w;
  encode(w, h);
  w.sequence(poses.size());
  for (const StampedPose& p : poses) {
    encode(w, Header{p.stamp, h.frame_id});
    encode_pose(w, p.pose);
  }
  return std::move(w.data());
}

std::string camera_info(const Header& h, uint32_t width, uint32_t height,
                        const std::array<double, 9>& k) {
  CdrWriter w;
  encode(w, h);
  w.u32(height);
  w.u32(width);
  w.string("plumb_bob");
  w.sequence(5);
  zeros(w, 5);
  for (double v : k) w.f64(v);
  for (int i = 0; i < 9; ++i) w.f64(i % 4 == 0 ? 1 : 0);  // R: identity
  for (int r = 0; r < 3; ++r) {                           // P = [K | 0]
    for (int c = 0; c < 3; ++c) w.f64(k[r * 3 + c]);
    w.f64(0);
  }
  w.u32(0);  // binning: none
  w.u32(0);
  for (int i = 0; i < 4; ++i) w.u32(0);  // roi: the whole image
  w.boolean(false);
  return std::move(w.data());
}

std::string image_32fc1(const Header& h, uint32_t width, uint32_t height, const float* data) {
  CdrWriter w;
  encode(w, h);
  w.u32(height);
  w.u32(width);
  w.string("32FC1");
  w.u8(0);  // little-endian
  w.u32(width * 4);
  const size_t n = static_cast<size_t>(width) * height * 4;
  const size_t at = w.reserve_bytes(n);
  if (n) std::memcpy(w.data().data() + at, data, n);
  return std::move(w.data());
}

std::string compressed_image(const Header& h, std::string_view format, std::string_view data) {
  CdrWriter w;
  encode(w, h);
  w.string(format);
  w.bytes(data);
  return std::move(w.data());
}

std::string point_cloud(const Header& h, const std::vector<CloudPoint>& points) {
  CdrWriter w;
  encode(w, h);
  w.u32(1);  // height: unordered
  w.u32(static_cast<uint32_t>(points.size()));
  constexpr uint8_t kFloat32 = 7;
  const std::pair<const char*, uint32_t> fields[] = {
      {"x", 0}, {"y", 4}, {"z", 8}, {"rgb", 12}, {"confidence", 16}};
  w.sequence(std::size(fields));
  for (const auto& [name, offset] : fields) {
    w.string(name);
    w.u32(offset);
    w.u8(kFloat32);
    w.u32(1);
  }
  w.boolean(false);  // little-endian
  w.u32(kCloudPointStep);
  w.u32(static_cast<uint32_t>(points.size() * kCloudPointStep));
  const size_t at = w.reserve_bytes(points.size() * kCloudPointStep);
  char* out = w.data().data() + at;
  for (const CloudPoint& p : points) {
    const uint32_t rgb = uint32_t{p.r} << 16 | uint32_t{p.g} << 8 | p.b;
    const float fields_of_point[5] = {p.x, p.y, p.z, std::bit_cast<float>(rgb), p.confidence};
    std::memcpy(out, fields_of_point, sizeof fields_of_point);
    out += kCloudPointStep;
  }
  w.boolean(true);  // dense: non-finite points are left out
  return std::move(w.data());
}

}  // namespace lingbot::mcap::ros
