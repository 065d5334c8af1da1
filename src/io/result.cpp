// A finished run read back: predictions.safetensors (as PredictionsWriter writes it) and the
// frames in images/.
#include "lingbot/result.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>

#include "io/sinks/sink_util.h"
#include "lingbot/error.h"
#include "lingbot/image.h"
#include "weights/safetensors.h"

namespace lingbot {
namespace {

const Tensor& need(const SafetensorsFile& f, const std::string& name, DType dtype,
                   const Shape& shape, const std::string& path) {
  auto it = f.tensors.find(name);
  LINGBOT_CHECK(it != f.tensors.end(), path + " is not a predictions file: it has no " + name);
  LINGBOT_CHECK(it->second.dtype() == dtype && it->second.shape() == shape,
                path + ": " + name + " is " + shape_str(it->second.shape()) + ", expected " +
                    shape_str(shape) + " " + dtype_name(dtype));
  return it->second;
}

template <size_t N>
void copy_row(std::array<float, N>& out, const Tensor& t, int64_t i) {
  std::memcpy(out.data(), t.data<float>() + i * N, N * sizeof(float));
}

void check_index(const RunResult& run, int64_t index) {
  LINGBOT_CHECK_ARG(index >= 0 && index < run.size(), "frame " + std::to_string(index) +
                                                          " is not in the run (" +
                                                          std::to_string(run.size()) + " frames)");
}

}  // namespace

RunResult read_result(const std::string& path) {
  namespace fs = std::filesystem;
  RunResult run;
  std::string file = path;
  if (fs::is_directory(path)) {
    run.dir = path;
    file = (fs::path(path) / "predictions.safetensors").string();
  } else {
    run.dir = fs::path(path).parent_path().string();
    if (run.dir.empty()) run.dir = ".";
  }
  if (!fs::exists(file)) throw Error("no predictions file: " + file, ErrorKind::NotFound);
  auto file_ptr = std::make_shared<const SafetensorsFile>(read_safetensors(file));
  const SafetensorsFile& f = *file_ptr;
  auto depth_it = f.tensors.find("depth");
  LINGBOT_CHECK(depth_it != f.tensors.end() && depth_it->second.rank() == 3,
                file + " is not a predictions file: no depth [S, H, W]");
  const int64_t s = depth_it->second.dim(0), h = depth_it->second.dim(1),
                w = depth_it->second.dim(2);
  need(f, "depth", DType::F32, {s, h, w}, file);
  need(f, "depth_conf", DType::F32, {s, h, w}, file);
  const Tensor& pose = need(f, "pose_enc", DType::F32, {s, 9}, file);
  const Tensor& c2w = need(f, "c2w", DType::F32, {s, 3, 4}, file);
  const Tensor& w2c = need(f, "w2c", DType::F32, {s, 3, 4}, file);
  const Tensor& k = need(f, "intrinsics", DType::F32, {s, 3, 3}, file);
  const Tensor& type = need(f, "frame_type", DType::U8, {s}, file);
  run.windowed = f.tensors.count("chunk_scales") > 0;
  run.frames.resize(static_cast<size_t>(s));
  for (int64_t i = 0; i < s; ++i) {
    FrameResult& r = run.frames[static_cast<size_t>(i)];
    r.index = i;
    const uint8_t t = type.data<uint8_t>()[i];
    LINGBOT_CHECK(t <= 2, file + ": frame_type " + std::to_string(t) + " of frame " +
                              std::to_string(i) + " is not 0, 1 or 2");
    r.scale_frame = t == 0;
    r.keyframe = t != 2;
    copy_row(r.pose_enc, pose, i);
    copy_row(r.c2w, c2w, i);
    copy_row(r.w2c, w2c, i);
    copy_row(r.intrinsics, k, i);
    r.height = static_cast<int>(h);
    r.width = static_cast<int>(w);
  }
  run.maps = std::move(file_ptr);
  return run;
}

FrameResult result_frame(const RunResult& run, int64_t index) {
  check_index(run, index);
  FrameResult r = run.frames[static_cast<size_t>(index)];
  const size_t plane = static_cast<size_t>(std::max(r.height, 0)) * std::max(r.width, 0);
  if (r.depth.size() == plane && r.confidence.size() == plane) return r;  // made in memory
  const auto* f = static_cast<const SafetensorsFile*>(run.maps.get());
  LINGBOT_CHECK(f, "frame " + std::to_string(index) + " of the run has no depth maps");
  const float* d = f->tensors.at("depth").data<float>() + index * plane;
  const float* c = f->tensors.at("depth_conf").data<float>() + index * plane;
  r.depth.assign(d, d + plane);
  r.confidence.assign(c, c + plane);
  return r;
}

std::optional<Tensor> read_result_image(const RunResult& run, int64_t index,
                                        const FrameNamer& name) {
  check_index(run, index);
  const std::string file =
      (std::filesystem::path(run.dir) / "images" / (name ? name(index) : default_frame_name(index)))
          .string();
  if (!std::filesystem::exists(file)) return std::nullopt;
  const ImageU8 img = load_image(file);
  const FrameResult& r = run.frames[static_cast<size_t>(index)];
  LINGBOT_CHECK(img.width == r.width && img.height == r.height,
                file + " is " + std::to_string(img.width) + "x" + std::to_string(img.height) +
                    ", the frame's maps " + std::to_string(r.width) + "x" +
                    std::to_string(r.height));
  return to_tensor(img);
}

FrameNamer result_image_names(const RunResult& run) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::path(run.dir) / "images";
  std::error_code ec;
  if (run.frames.empty() || fs::exists(dir / default_frame_name(0), ec) ||
      !fs::is_directory(dir, ec))
    return default_frame_name;
  std::vector<std::string> names;
  try {
    for (const std::string& p : list_images(dir.string()))
      names.push_back(fs::path(p).filename().string());
  } catch (const Error&) {  // an empty or unreadable folder: no colours, as without one
    return default_frame_name;
  }
  if (names.size() != run.frames.size()) return default_frame_name;
  return [names = std::move(names)](int64_t i) {
    return i >= 0 && i < static_cast<int64_t>(names.size()) ? names[static_cast<size_t>(i)]
                                                            : default_frame_name(i);
  };
}

FramePoints frame_points(const FrameResult& frame, const Tensor* rgb, const PointOptions& options) {
  sinks::check_result(frame);
  FramePoints p;
  sinks::for_each_point(frame, rgb, options, [&](const sinks::Point& q) {
    p.xyz.insert(p.xyz.end(), {q.x, q.y, q.z});
    p.rgb.insert(p.rgb.end(), q.rgb.begin(), q.rgb.end());
    p.confidence.push_back(q.confidence);
  });
  return p;
}

std::array<uint8_t, 3> camera_colour(int64_t index, int64_t count) {
  // Viridis' ends and middle, interpolated: distinguishable in order, readable on dark and light.
  static constexpr float kStops[3][3] = {{68, 1, 84}, {33, 145, 140}, {253, 231, 37}};
  const float t = count > 1 ? std::clamp(float(index) / float(count - 1), 0.0f, 1.0f) : 0.0f;
  const int a = t < 0.5f ? 0 : 1;
  const float f = t < 0.5f ? t * 2 : (t - 0.5f) * 2;
  std::array<uint8_t, 3> c;
  for (int k = 0; k < 3; ++k)
    c[k] = static_cast<uint8_t>(std::lround(kStops[a][k] + f * (kStops[a + 1][k] - kStops[a][k])));
  return c;
}

}  // namespace lingbot
