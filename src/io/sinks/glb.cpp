// Binary glTF 2.0 (GLB) scene: the point cloud of the PLY sink and one camera frustum per frame,
// for viewers and web pages that open glTF but not PLY.
//
// A GLB declares its total length and every buffer offset up front, so it cannot grow in place.
// The points stay in memory instead (already thinned by the threshold and the stride, 16 bytes
// each) and the whole file is replaced (temporary + rename) every 16 frames, or every eighth of
// the frames so far once that is more, and at finish(): an interrupted run leaves the last
// complete scene, and the rewrites cost a bounded multiple of the final size however long the
// run. Vertex data is in world coordinates (OpenCV axes, like the other exports); only the root
// node turns it 180 degrees about x for glTF's y-up convention.
#include <algorithm>
#include <bit>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <string_view>
#include <vector>

#include "io/sinks/sink.h"
#include "io/sinks/sink_util.h"

namespace lingbot {
namespace {

static_assert(std::endian::native == std::endian::little,
              "GLB buffers are little-endian and are written straight from memory");

constexpr uint32_t kMagic = 0x46546C67;      // "glTF"
constexpr uint32_t kJsonChunk = 0x4E4F534A;  // "JSON"
constexpr uint32_t kBinChunk = 0x004E4942;   // "BIN\0"
constexpr int kFloat = 5126, kUnsignedByte = 5121, kUnsignedInt = 5125;
constexpr int kArrayBuffer = 34962, kElementArrayBuffer = 34963;
constexpr int kPoints = 0, kLines = 1;

constexpr int64_t kMinRewriteFrames = 16;
constexpr int64_t kMaxFrusta = 512;       // beyond: every k-th camera, evenly over the run
constexpr float kFrustumFraction = 0.1f;  // of the typical scene depth
// Room kept under the format's 4 GiB for the JSON chunk and the frusta.
constexpr uint64_t kGlbLimit = std::numeric_limits<uint32_t>::max() - (64u << 20);

// apex, then the image corners clockwise from top-left: 4 sides and 4 edges of the pyramid.
constexpr uint32_t kFrustumLines[16] = {0, 1, 0, 2, 0, 3, 0, 4, 1, 2, 2, 3, 3, 4, 4, 1};

struct Camera {
  std::array<float, 12> c2w;
  float fx, fy, cx, cy;
  int width, height;
};

std::string u32(uint32_t v) {
  char b[4];
  std::memcpy(b, &v, 4);
  return std::string(b, 4);
}

template <class T>
std::string_view bytes(const std::vector<T>& v) {
  return {reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T)};
}

nlohmann::json bounds(const std::array<float, 3>& b) {
  return {static_cast<double>(b[0]), static_cast<double>(b[1]), static_cast<double>(b[2])};
}

class GlbSink : public ResultSink {
 public:
  std::string name() const override { return "glb"; }
  GlbSink(const std::string& path, PointOptions o) : path_(path), o_(o) {
    LINGBOT_CHECK(o_.stride >= 1, "the point stride must be at least 1");
    write();  // an empty scene at once: the path is known to be writable before any frame runs
  }

  void add(const FrameResult& r, const Tensor* rgb) override {
    sinks::check_result(r);
    // glTF accessors need finite bounds: a frame without a finite pose has neither points nor a
    // frustum to draw.
    if (!sinks::finite_pose(r)) {
      ++skipped_.frames;
      return;
    }
    frame_positions_.clear();
    frame_colours_.clear();
    voxels_.start_frame(r);
    skipped_.points += sinks::for_each_point(r, rgb, o_, [&](const sinks::Point& p) {
      if (!voxels_.keep(p)) return;
      frame_positions_.insert(frame_positions_.end(), {p.x, p.y, p.z});
      frame_colours_.insert(frame_colours_.end(), {p.rgb[0], p.rgb[1], p.rgb[2], 255});
    });
    LINGBOT_CHECK((positions_.size() + frame_positions_.size()) / 3 * 16 <= kGlbLimit,
                  "cannot write " + path_ +
                      ": the points pass the 4 GB a GLB file can hold; raise the point stride or "
                      "the confidence threshold");
    for (size_t i = 0; i < frame_positions_.size(); ++i) {
      lo_[i % 3] = std::min(lo_[i % 3], frame_positions_[i]);
      hi_[i % 3] = std::max(hi_[i % 3], frame_positions_[i]);
    }
    positions_.insert(positions_.end(), frame_positions_.begin(), frame_positions_.end());
    colours_.insert(colours_.end(), frame_colours_.begin(), frame_colours_.end());
    const auto& k = r.intrinsics;
    cameras_.push_back({r.c2w, k[0], k[4], k[2], k[5], r.width, r.height});
    depths_.push_back(sinks::typical_depth(r, o_.stride));
    if (static_cast<int64_t>(cameras_.size()) - written_frames_ >=
        std::max<int64_t>(kMinRewriteFrames, static_cast<int64_t>(cameras_.size()) / 8))
      write();
  }

  void finish() override {
    if (written_frames_ != static_cast<int64_t>(cameras_.size())) write();
  }
  std::string notes() const override { return skipped_.note(name()); }

 private:
  // Pyramids of the drawn cameras: apex at the centre, base on the image border (pixel u spans
  // u +- 0.5, the viewer's convention) at a tenth of the median of the frames' median depths.
  void frusta(std::vector<float>& vertices, std::vector<uint32_t>& indices) const {
    const int64_t n = static_cast<int64_t>(cameras_.size());
    const int64_t step = (n + kMaxFrusta - 1) / kMaxFrusta;
    std::vector<float> d;
    for (float x : depths_)
      if (x > 0) d.push_back(x);
    float depth = 1;
    if (!d.empty()) {
      std::nth_element(d.begin(), d.begin() + d.size() / 2, d.end());
      depth = d[d.size() / 2];
    }
    depth *= kFrustumFraction;
    for (int64_t i = 0; i < n; i += std::max<int64_t>(step, 1)) {
      const Camera& c = cameras_[i];
      const auto first = static_cast<uint32_t>(vertices.size() / 3);
      const float us[4] = {-0.5f, c.width - 0.5f, c.width - 0.5f, -0.5f};
      const float vs[4] = {-0.5f, -0.5f, c.height - 0.5f, c.height - 0.5f};
      for (int k = 0; k < 3; ++k) vertices.push_back(c.c2w[k * 4 + 3]);
      for (int j = 0; j < 4; ++j) {
        const double x = (us[j] - c.cx) * depth / c.fx, y = (vs[j] - c.cy) * depth / c.fy;
        for (int k = 0; k < 3; ++k) {
          const float* row = &c.c2w[k * 4];
          vertices.push_back(static_cast<float>(row[0] * x + row[1] * y + row[2] * depth + row[3]));
        }
      }
      for (uint32_t e : kFrustumLines) indices.push_back(first + e);
    }
  }

  void write() {
    std::vector<float> fv;
    std::vector<uint32_t> fi;
    frusta(fv, fi);
    const uint32_t points = static_cast<uint32_t>(positions_.size() / 3);
    const uint32_t corners = static_cast<uint32_t>(fv.size() / 3);

    nlohmann::json views = nlohmann::json::array(), accessors = nlohmann::json::array();
    nlohmann::json meshes = nlohmann::json::array(), children = nlohmann::json::array();
    nlohmann::json materials = nlohmann::json::array();
    std::vector<std::string_view> blobs;
    uint64_t offset = 0;
    // Every blob is a whole number of 4-byte elements, so consecutive views stay aligned.
    auto view = [&](std::string_view blob, int target) {
      views.push_back(
          {{"buffer", 0}, {"byteOffset", offset}, {"byteLength", blob.size()}, {"target", target}});
      blobs.push_back(blob);
      offset += blob.size();
      return views.size() - 1;
    };
    auto add_mesh = [&](const char* name, nlohmann::json primitive) {
      meshes.push_back(
          {{"name", name}, {"primitives", nlohmann::json::array({std::move(primitive)})}});
      children.push_back(children.size() + 1);
    };
    if (points) {
      accessors.push_back({{"bufferView", view(bytes(positions_), kArrayBuffer)},
                           {"componentType", kFloat},
                           {"count", points},
                           {"type", "VEC3"},
                           {"min", bounds(lo_)},
                           {"max", bounds(hi_)}});
      accessors.push_back({{"bufferView", view(bytes(colours_), kArrayBuffer)},
                           {"componentType", kUnsignedByte},
                           {"normalized", true},
                           {"count", points},
                           {"type", "VEC4"}});
      add_mesh("points", {{"attributes", {{"POSITION", 0}, {"COLOR_0", 1}}}, {"mode", kPoints}});
    }
    if (corners) {
      std::array<float, 3> lo, hi;
      lo.fill(std::numeric_limits<float>::infinity());
      hi.fill(-std::numeric_limits<float>::infinity());
      for (size_t i = 0; i < fv.size(); ++i) {
        lo[i % 3] = std::min(lo[i % 3], fv[i]);
        hi[i % 3] = std::max(hi[i % 3], fv[i]);
      }
      const size_t at = accessors.size();
      accessors.push_back({{"bufferView", view(bytes(fv), kArrayBuffer)},
                           {"componentType", kFloat},
                           {"count", corners},
                           {"type", "VEC3"},
                           {"min", bounds(lo)},
                           {"max", bounds(hi)}});
      accessors.push_back({{"bufferView", view(bytes(fi), kElementArrayBuffer)},
                           {"componentType", kUnsignedInt},
                           {"count", fi.size()},
                           {"type", "SCALAR"}});
      materials.push_back(
          {{"name", "camera"},
           {"pbrMetallicRoughness",
            {{"baseColorFactor", {1.0, 0.35, 0.1, 1.0}}, {"metallicFactor", 0.0}}}});
      add_mesh("cameras", {{"attributes", {{"POSITION", at}}},
                           {"indices", at + 1},
                           {"material", 0},
                           {"mode", kLines}});
    }

    nlohmann::json root = {{"name", "world (OpenCV axes)"}, {"rotation", {1.0, 0.0, 0.0, 0.0}}};
    if (!children.empty()) root["children"] = children;
    nlohmann::json nodes = nlohmann::json::array({root});
    for (size_t m = 0; m < meshes.size(); ++m)
      nodes.push_back({{"name", meshes[m]["name"]}, {"mesh", m}});
    nlohmann::json gltf = {{"asset",
                            {{"version", "2.0"},
                             {"generator", "lingbot-map"},
                             {"extras",
                              {{"frames", cameras_.size()},
                               {"conf_threshold", o_.conf_threshold},
                               {"point_stride", o_.stride},
                               {"voxel", o_.voxel}}}}},
                           {"scene", 0},
                           {"scenes", nlohmann::json::array({{{"nodes", {0}}}})},
                           {"nodes", nodes}};
    if (!meshes.empty()) gltf["meshes"] = meshes;
    if (!materials.empty()) gltf["materials"] = materials;
    if (offset) {
      gltf["buffers"] = {{{"byteLength", offset}}};
      gltf["bufferViews"] = views;
      gltf["accessors"] = accessors;
    }
    std::string json = gltf.dump();
    json.append((4 - json.size() % 4) % 4, ' ');
    const uint64_t bin = (offset + 3) / 4 * 4;
    const uint64_t total = 12 + 8 + json.size() + (offset ? 8 + bin : 0);
    LINGBOT_CHECK(total <= std::numeric_limits<uint32_t>::max(),
                  "cannot write " + path_ + ": more than the 4 GB a GLB file can hold");

    sinks::replace_file(path_, [&](sinks::OutFile& f) {
      f.write(u32(kMagic) + u32(2) + u32(static_cast<uint32_t>(total)));
      f.write(u32(static_cast<uint32_t>(json.size())) + u32(kJsonChunk));
      f.write(json);
      if (!offset) return;
      f.write(u32(static_cast<uint32_t>(bin)) + u32(kBinChunk));
      for (std::string_view b : blobs) f.write(b);
      f.write(std::string(bin - offset, '\0'));
    });
    written_frames_ = static_cast<int64_t>(cameras_.size());
  }

  std::string path_;
  PointOptions o_;
  sinks::VoxelFilter voxels_{o_};
  sinks::Skipped skipped_;
  std::vector<float> positions_;  // x y z per point
  std::vector<uint8_t> colours_;  // r g b a per point
  std::array<float, 3> lo_{std::numeric_limits<float>::infinity(),
                           std::numeric_limits<float>::infinity(),
                           std::numeric_limits<float>::infinity()};
  std::array<float, 3> hi_{-std::numeric_limits<float>::infinity(),
                           -std::numeric_limits<float>::infinity(),
                           -std::numeric_limits<float>::infinity()};
  std::vector<Camera> cameras_;
  std::vector<float> depths_;  // typical depth of each frame, for the frustum size
  std::vector<float> frame_positions_;
  std::vector<uint8_t> frame_colours_;
  int64_t written_frames_ = 0;
};

}  // namespace

std::unique_ptr<ResultSink> make_glb_sink(const std::string& path, PointOptions options) {
  return std::make_unique<GlbSink>(path, options);
}

}  // namespace lingbot
