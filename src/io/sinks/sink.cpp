#include "io/sinks/sink.h"

#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <filesystem>

#include "io/sinks/sink_util.h"
#include "lingbot/preflight.h"

namespace lingbot {
namespace sinks {

void make_folder(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec || !std::filesystem::is_directory(dir))
    throw Error("cannot create output folder " + dir + ": " +
                (ec ? ec.message() : std::string("a file of that name is in the way")));
}

OutFile::OutFile(const std::string& path, bool binary) : path_(path) {
  f_ = std::fopen(path.c_str(), binary ? "wb+" : "w+");
  if (!f_) throw Error("cannot write " + path + ": " + std::strerror(errno));
}

OutFile::~OutFile() {
  if (f_) std::fclose(f_);
}

void OutFile::fail() const {
  const int e = errno;
  throw Error("cannot write " + path_ + ": " + (e ? std::strerror(e) : "disk full?"));
}

void OutFile::write(std::string_view bytes) {
  if (!f_) fail();
  if (bytes.empty()) return;  // an empty view may have no data pointer, which fwrite may not take
  errno = 0;
  if (std::fwrite(bytes.data(), 1, bytes.size(), f_) != bytes.size()) fail();
  size_ += static_cast<int64_t>(bytes.size());
}

void OutFile::write_at(int64_t offset, std::string_view bytes) {
  if (!f_) fail();
  if (bytes.empty()) return;
  errno = 0;
  if (std::fseek(f_, offset, SEEK_SET) != 0 ||
      std::fwrite(bytes.data(), 1, bytes.size(), f_) != bytes.size() ||
      std::fseek(f_, 0, SEEK_END) != 0)
    fail();
  size_ = std::max(size_, offset + static_cast<int64_t>(bytes.size()));
}

void OutFile::truncate(int64_t size) {
  if (!f_) fail();
  errno = 0;
  if (std::fflush(f_) != 0 || ::ftruncate(fileno(f_), size) != 0 ||
      std::fseek(f_, 0, SEEK_END) != 0)
    fail();
  size_ = size;
}

void OutFile::flush() {
  errno = 0;
  if (!f_ || std::fflush(f_) != 0) fail();
}

void OutFile::close() {
  if (!f_) return;
  errno = 0;
  const bool ok = std::fclose(f_) == 0;
  f_ = nullptr;
  if (!ok) fail();
}

void replace_file(const std::string& path, const std::function<void(OutFile&)>& write) {
  const std::string tmp = path + ".tmp";
  try {
    OutFile f(tmp, true);
    write(f);
    f.close();
  } catch (...) {
    std::error_code ignored;
    std::filesystem::remove(tmp, ignored);
    throw;
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) throw Error("cannot write " + path + ": " + ec.message());
}

std::string fmt(float v) {
  char buf[32];
  return std::string(buf, std::to_chars(buf, buf + sizeof buf, v).ptr);
}

std::string fmt(double v) {
  char buf[32];
  return std::string(buf, std::to_chars(buf, buf + sizeof buf, v).ptr);
}

// Shepperd's method: divide by the largest of the four candidates so that no branch loses
// precision near 180-degree turns.
std::array<double, 4> rotation_to_quaternion(const std::array<float, 12>& m) {
  const double m00 = m[0], m01 = m[1], m02 = m[2], m10 = m[4], m11 = m[5], m12 = m[6], m20 = m[8],
               m21 = m[9], m22 = m[10];
  const double trace = m00 + m11 + m22;
  double x, y, z, w;
  if (trace > 0) {
    const double s = 2 * std::sqrt(1 + trace);
    w = s / 4, x = (m21 - m12) / s, y = (m02 - m20) / s, z = (m10 - m01) / s;
  } else if (m00 > m11 && m00 > m22) {
    const double s = 2 * std::sqrt(1 + m00 - m11 - m22);
    w = (m21 - m12) / s, x = s / 4, y = (m01 + m10) / s, z = (m02 + m20) / s;
  } else if (m11 > m22) {
    const double s = 2 * std::sqrt(1 + m11 - m00 - m22);
    w = (m02 - m20) / s, x = (m01 + m10) / s, y = s / 4, z = (m12 + m21) / s;
  } else {
    const double s = 2 * std::sqrt(1 + m22 - m00 - m11);
    w = (m10 - m01) / s, x = (m02 + m20) / s, y = (m12 + m21) / s, z = s / 4;
  }
  double n = std::sqrt(x * x + y * y + z * z + w * w);
  if (!(n > 0)) return {0, 0, 0, 1};
  if (w < 0) n = -n;  // q and -q are one rotation; w >= 0 makes the output unique
  return {x / n, y / n, z / n, w / n};
}

PixelColours::PixelColours(const Tensor* rgb, const FrameResult& r)
    : rgb_(rgb), plane_(static_cast<int64_t>(r.height) * r.width) {
  if (!rgb_) return;
  LINGBOT_CHECK(rgb_->rank() == 3 && rgb_->dim(0) == 3 && rgb_->dim(1) == r.height &&
                    rgb_->dim(2) == r.width &&
                    (rgb_->dtype() == DType::U8 || rgb_->dtype() == DType::F32) &&
                    rgb_->device() == Device::CPU,
                "the colours of frame " + std::to_string(r.index) +
                    " must be a host U8 or F32 [3, " + std::to_string(r.height) + ", " +
                    std::to_string(r.width) + "] tensor, got " + shape_str(rgb_->shape()));
}

std::array<uint8_t, 3> PixelColours::at(int64_t pixel) const {
  if (!rgb_) return {128, 128, 128};
  std::array<uint8_t, 3> c;
  for (int k = 0; k < 3; ++k) {
    if (rgb_->dtype() == DType::U8) {
      c[k] = rgb_->data<uint8_t>()[k * plane_ + pixel];
    } else {
      const float f = rgb_->data<float>()[k * plane_ + pixel];
      c[k] = f > 0 ? static_cast<uint8_t>(std::lround(std::min(f, 1.0f) * 255.0f)) : 0;
    }
  }
  return c;
}

float typical_depth(const FrameResult& r, int stride) {
  std::vector<float> d;
  for (int v = 0; v < r.height; v += stride)
    for (int u = 0; u < r.width; u += stride) {
      const float x = r.depth[static_cast<size_t>(v) * r.width + u];
      if (std::isfinite(x) && x > 0) d.push_back(x);
    }
  if (d.empty()) return 0;
  auto mid = d.begin() + d.size() / 2;
  std::nth_element(d.begin(), mid, d.end());
  return *mid;
}

VoxelFilter::VoxelFilter(const PointOptions& o, int64_t max_buckets)
    : voxel_(o.voxel), stride_(std::max(o.stride, 1)), max_buckets_(max_buckets) {
  LINGBOT_CHECK(std::isfinite(voxel_) && voxel_ >= 0,
                "the point voxel must be a fraction >= 0, got " + fmt(voxel_));
  LINGBOT_CHECK(max_buckets > 0 && std::has_single_bit(static_cast<uint64_t>(max_buckets)),
                "voxel buckets: a power of two");
}

void VoxelFilter::start_frame(const FrameResult& r) {
  if (voxel_ == 0 || edge_ > 0) return;
  edge_ = voxel_ * typical_depth(r, stride_);
  if (edge_ > 0) {
    buckets_ = std::min<int64_t>(max_buckets_, 4096);
    keys_.assign(static_cast<size_t>(buckets_) * 8, 0);
  }
}

bool VoxelFilter::keep(const Point& p) {
  if (!(edge_ > 0)) return true;
  // 21 bits a cube index, +-2^20 cubes from the origin (cubes beyond join the outermost): the
  // three in one key, its top bit set so that no key is 0.
  constexpr double kHalf = 1 << 20;
  auto cell = [&](float x) {
    const double c = std::clamp(std::floor(static_cast<double>(x) / edge_), -kHalf, kHalf - 1);
    return static_cast<uint64_t>(static_cast<int64_t>(c) + (int64_t{1} << 20));
  };
  const uint64_t key = (uint64_t{1} << 63) | cell(p.x) << 42 | cell(p.y) << 21 | cell(p.z);
  if (!insert(key)) return false;
  if (++stored_ > buckets_ * 4 && buckets_ < max_buckets_) grow();
  return true;
}

bool VoxelFilter::insert(uint64_t key) {
  // Fibonacci hashing: the top bits of the product pick the bucket.
  const int bits = std::countr_zero(static_cast<uint64_t>(buckets_));
  const size_t b = bits ? static_cast<size_t>((key * 0x9E3779B97F4A7C15ull) >> (64 - bits)) : 0;
  uint64_t* slots = keys_.data() + 8 * b;
  for (int i = 0; i < 8; ++i) {
    if (slots[i] == key) return false;
    if (slots[i] == 0) {
      slots[i] = key;
      return true;
    }
  }
  // Full: below the bound only by bad luck (the table grows at half), so it forgets there too.
  if (oldest_.empty()) oldest_.assign(static_cast<size_t>(buckets_), 0);
  slots[oldest_[b]] = key;
  oldest_[b] = static_cast<uint8_t>((oldest_[b] + 1) % 8);
  return true;
}

void VoxelFilter::grow() {
  std::vector<uint64_t> old = std::move(keys_);
  buckets_ = std::min(buckets_ * 4, max_buckets_);
  keys_.assign(static_cast<size_t>(buckets_) * 8, 0);
  oldest_.clear();
  stored_ = 0;
  for (uint64_t k : old)
    if (k) stored_ += insert(k);
}

bool finite_camera(const FrameResult& r) {
  auto finite = [](const auto& a) {
    return std::all_of(a.begin(), a.end(), [](float x) { return std::isfinite(x); });
  };
  return finite(r.pose_enc) && finite(r.c2w) && finite(r.w2c) && finite(r.intrinsics) &&
         r.intrinsics[0] > 0 && r.intrinsics[4] > 0;
}

bool finite_pose(const FrameResult& r) {
  auto finite = [](const auto& a) {
    return std::all_of(a.begin(), a.end(), [](float x) { return std::isfinite(x); });
  };
  return std::all_of(r.pose_enc.begin(), r.pose_enc.begin() + 7,
                     [](float x) { return std::isfinite(x); }) &&
         finite(r.c2w) && finite(r.w2c);
}

std::string Skipped::note(const std::string& format) const {
  if (frames == 0 && points == 0) return {};
  std::string s = format + ": skipped ";
  if (frames)
    s += std::to_string(frames) + " frame" + (frames == 1 ? "" : "s") + " with non-finite cameras";
  if (frames && points) s += " and ";
  if (points)
    s += std::to_string(points) + " point" + (points == 1 ? "" : "s") + " with non-finite values";
  return s;
}

void check_result(const FrameResult& r) {
  const size_t n = static_cast<size_t>(std::max(r.height, 0)) * std::max(r.width, 0);
  LINGBOT_CHECK(r.height > 0 && r.width > 0 && r.depth.size() == n && r.confidence.size() == n,
                "frame " + std::to_string(r.index) + " has no " + std::to_string(r.width) + "x" +
                    std::to_string(r.height) + " depth and confidence maps to export");
}

}  // namespace sinks

std::string default_frame_name(int64_t index) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "frame_%06lld.png", static_cast<long long>(index));
  return buf;
}

namespace {
const char* const kFormats[] = {"tum", "kitti", "json",   "depth",  "depth_f32",
                                "ply", "glb",   "images", "colmap", "nerfstudio"};
// Named only: not in "all".
const char* const kNamedOnly[] = {"mcap"};
}  // namespace

std::vector<std::string> parse_export_list(const std::string& list) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= list.size()) {
    size_t end = list.find(',', start);
    if (end == std::string::npos) end = list.size();
    const std::string item = list.substr(start, end - start);
    start = end + 1;
    if (item.empty() || item == "none") continue;
    if (item == "all") {
      out.assign(std::begin(kFormats), std::end(kFormats));
      continue;
    }
    if (std::find(std::begin(kFormats), std::end(kFormats), item) == std::end(kFormats) &&
        std::find(std::begin(kNamedOnly), std::end(kNamedOnly), item) == std::end(kNamedOnly))
      throw Error(
          "unknown export format '" + item +
              "' (tum, kitti, json, depth, depth_f32, ply, glb, images, colmap, nerfstudio, "
              "mcap, all or none)",
          ErrorKind::InvalidArgument);
    if (std::find(out.begin(), out.end(), item) == out.end()) out.push_back(item);
  }
  return out;
}

namespace {
bool has_format(const ExportOptions& o, const char* f) {
  return std::find(o.formats.begin(), o.formats.end(), f) != o.formats.end();
}
}  // namespace

ResultOutputs export_outputs(const ExportOptions& o) {
  auto has = [&](const char* f) { return has_format(o, f); };
  return {.glb = has("glb"),
          .point_stride = o.points.stride,
          .voxel_filters =
              o.points.voxel > 0 ? has("ply") + has("glb") + has("colmap") + has("mcap") : 0};
}

const std::vector<std::string>& run_output_names() {
  // Keep in step with make_sinks, PredictionsWriter and the CLI's run.json.
  static const std::vector<std::string> names = {"run.json",
                                                 "predictions.safetensors",
                                                 "predictions.safetensors.partial",
                                                 "predictions.safetensors.conf.partial",
                                                 "trajectory_tum.txt",
                                                 "trajectory_kitti.txt",
                                                 "trajectory_tum_optimized.txt",
                                                 "trajectory_kitti_optimized.txt",
                                                 ".loop-closure.partial",
                                                 "frames.jsonl",
                                                 "depth",
                                                 "confidence",
                                                 "depth_scale.json",
                                                 "depth_f32",
                                                 "confidence_f32",
                                                 "points.ply",
                                                 "points.glb",
                                                 "images",
                                                 "colmap",
                                                 "transforms.json",
                                                 "result.mcap"};
  return names;
}

std::vector<std::string> existing_run_outputs(const std::string& dir) {
  std::vector<std::string> found;
  std::error_code ec;
  for (const std::string& name : run_output_names())
    if (std::filesystem::exists(std::filesystem::path(dir) / name, ec)) found.push_back(name);
  return found;
}

void remove_run_outputs(const std::string& dir) {
  for (const std::string& name : existing_run_outputs(dir)) {
    std::error_code ec;
    std::filesystem::remove_all(std::filesystem::path(dir) / name, ec);
    if (ec) throw Error("cannot remove " + dir + "/" + name + ": " + ec.message());
  }
}

std::vector<std::unique_ptr<ResultSink>> make_sinks(const ExportOptions& o) {
  auto has = [&](const char* f) { return has_format(o, f); };
  const FrameNamer name = o.name ? o.name : FrameNamer(default_frame_name);
  const std::string dir = o.out_dir.empty() ? "." : o.out_dir;
  std::vector<std::unique_ptr<ResultSink>> sinks;
  if (!o.formats.empty()) sinks::make_folder(dir);
  if (has("tum"))
    sinks.push_back(
        make_trajectory_sink(dir + "/trajectory_tum.txt", TrajectoryFormat::TUM, o.timestamp));
  if (has("kitti"))
    sinks.push_back(make_trajectory_sink(dir + "/trajectory_kitti.txt", TrajectoryFormat::KITTI));
  if (has("json")) sinks.push_back(make_frames_json_sink(dir + "/frames.jsonl", name));
  // These three need no maps: a continued session's saved cameras begin them.
  for (auto& s : sinks)
    for (const FrameResult& r : o.history) s->add(r, nullptr);
  if (has("depth")) sinks.push_back(make_depth_png_sink(dir, o.depth, name));
  if (has("depth_f32")) sinks.push_back(make_depth_npy_sink(dir, name));
  if (has("ply")) sinks.push_back(make_ply_sink(dir + "/points.ply", o.points));
  if (has("glb")) sinks.push_back(make_glb_sink(dir + "/points.glb", o.points));
  // COLMAP and nerfstudio describe cameras of the model input, which differs from the
  // original pictures after crop/resize, so the input itself goes beside them; `render` and the
  // viewer colour their points from it.
  if (has("images") || has("colmap") || has("nerfstudio"))
    sinks.push_back(make_image_sink(dir + "/images", name));
  if (has("colmap")) sinks.push_back(make_colmap_sink(dir + "/colmap", o.points, name));
  if (has("nerfstudio")) {
    NerfstudioOptions n;
    if (has("depth")) n.depth_dir = "depth";
    if (has("ply")) n.ply_file = "points.ply";
    sinks.push_back(make_nerfstudio_sink(dir + "/transforms.json", n, name));
  }
  if (has("mcap"))
    sinks.push_back(
        make_mcap_sink(dir + "/result.mcap",
                       {.points = o.points, .timestamp = o.timestamp, .frame_rate = o.frame_rate}));
  return sinks;
}

}  // namespace lingbot
