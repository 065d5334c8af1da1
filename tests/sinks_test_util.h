// For the export tests: synthetic frames, and readers that parse the files the way other tools
// would, sharing no code with the writers.
#pragma once

#include <gtest/gtest.h>
#include <png.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "lingbot/engine.h"
#include "model/pose.h"

namespace lingbot::test {

constexpr int kW = 20, kH = 12;

// A camera from a pose encoding (so c2w, w2c and K agree as the engine makes them), depth that
// varies over the image and confidence scattered over 1, 1.5, 2 and 2.5.
inline FrameResult make_frame(int64_t index,
                              std::array<float, 4> quat = {0.1f, -0.2f, 0.3f, 0.9f}) {
  FrameResult r;
  r.index = index;
  r.keyframe = index % 2 == 0;
  const float t[3] = {0.3f * index, -0.2f, 1.0f + index};
  r.pose_enc = {t[0], t[1], t[2], quat[0], quat[1], quat[2], quat[3], 1.0f, 1.2f};
  const CameraPose p = decode_pose(r.pose_enc.data(), kH, kW);
  std::memcpy(r.c2w.data(), p.c2w, sizeof p.c2w);
  std::memcpy(r.w2c.data(), p.w2c, sizeof p.w2c);
  std::memcpy(r.intrinsics.data(), p.K, sizeof p.K);
  r.height = kH;
  r.width = kW;
  for (int v = 0; v < kH; ++v)
    for (int u = 0; u < kW; ++u) {
      r.depth.push_back(1.0f + 0.05f * u + 0.02f * v + 0.1f * index);
      r.confidence.push_back(1.0f + 0.5f * ((u * 7 + v * 13 + int(index) * 5) / 3 % 4));
    }
  return r;
}

inline Tensor make_rgb_u8(int64_t seed) {
  Tensor t = Tensor::zeros({3, kH, kW}, DType::U8);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<uint8_t>()[i] = uint8_t((i * 7 + seed * 31) % 256);
  return t;
}

struct Expected {
  double x, y, z;
  int u, v;
  float conf;
};

// The viewer's unprojection written out independently of the sinks.
inline std::vector<Expected> expected_points(const FrameResult& r, float threshold, int stride) {
  std::vector<Expected> out;
  const auto& k = r.intrinsics;
  const auto& m = r.c2w;
  for (int v = 0; v < r.height; v += stride)
    for (int u = 0; u < r.width; u += stride) {
      const size_t i = size_t(v) * r.width + u;
      if (!(r.confidence[i] > threshold)) continue;
      const double d = r.depth[i];
      const double c[3] = {(u - k[2]) * d / k[0], (v - k[5]) * d / k[4], d};
      Expected e{0, 0, 0, u, v, r.confidence[i]};
      double* w[3] = {&e.x, &e.y, &e.z};
      for (int row = 0; row < 3; ++row)
        *w[row] =
            m[row * 4] * c[0] + m[row * 4 + 1] * c[1] + m[row * 4 + 2] * c[2] + m[row * 4 + 3];
      out.push_back(e);
    }
  return out;
}

inline std::vector<std::string> read_lines(const std::string& path) {
  std::ifstream f(path);
  EXPECT_TRUE(f.good()) << path;
  std::vector<std::string> lines;
  for (std::string l; std::getline(f, l);) lines.push_back(l);
  return lines;
}

inline std::vector<double> numbers(const std::string& line) {
  std::istringstream s(line);
  std::vector<double> v;
  for (double x; s >> x;) v.push_back(x);
  return v;
}

// Row-major 3x3 of a quaternion (any scale).
inline std::array<double, 9> quat_to_rot(double x, double y, double z, double w) {
  const double n = x * x + y * y + z * z + w * w, s = 2 / n;
  return {1 - s * (y * y + z * z), s * (x * y - z * w),     s * (x * z + y * w),
          s * (x * y + z * w),     1 - s * (x * x + z * z), s * (y * z - x * w),
          s * (x * z - y * w),     s * (y * z + x * w),     1 - s * (x * x + y * y)};
}

struct PlyVertex {
  float x, y, z;
  uint8_t r, g, b;
  float confidence;
};

struct PlyCloud {
  std::vector<std::string> header;  // lines up to end_header
  int64_t count = -1;               // from "element vertex"
  std::vector<PlyVertex> vertices;  // the counted ones
  int64_t extra_bytes = 0;          // after the counted vertices
  bool ok = false;                  // header as expected and every counted vertex present
};

inline PlyCloud read_ply(const std::string& path) {
  PlyCloud c;
  std::ifstream f(path, std::ios::binary);
  if (!f) return c;
  std::string line;
  const std::vector<std::string> props = {"property float x",         "property float y",
                                          "property float z",         "property uchar red",
                                          "property uchar green",     "property uchar blue",
                                          "property float confidence"};
  std::vector<std::string> seen_props;
  bool binary_le = false;
  while (std::getline(f, line)) {
    c.header.push_back(line);
    if (line == "end_header") break;
    if (line == "format binary_little_endian 1.0") binary_le = true;
    if (line.rfind("element vertex ", 0) == 0) c.count = std::stoll(line.substr(15));
    if (line.rfind("property ", 0) == 0) seen_props.push_back(line);
  }
  if (c.header.empty() || c.header.front() != "ply" || c.header.back() != "end_header" ||
      !binary_le || seen_props != props || c.count < 0)
    return c;
  const std::string data((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  constexpr size_t kStride = 19;
  if (data.size() < static_cast<size_t>(c.count) * kStride) return c;
  for (int64_t i = 0; i < c.count; ++i) {
    const char* p = data.data() + i * kStride;
    PlyVertex v;  // little-endian host, as the test machines are
    std::memcpy(&v.x, p, 4);
    std::memcpy(&v.y, p + 4, 4);
    std::memcpy(&v.z, p + 8, 4);
    v.r = static_cast<uint8_t>(p[12]);
    v.g = static_cast<uint8_t>(p[13]);
    v.b = static_cast<uint8_t>(p[14]);
    std::memcpy(&v.confidence, p + 15, 4);
    c.vertices.push_back(v);
  }
  c.extra_bytes = static_cast<int64_t>(data.size()) - c.count * static_cast<int64_t>(kStride);
  c.ok = true;
  return c;
}

struct Gray16 {
  int width = 0, height = 0, bit_depth = 0, color_type = -1;
  std::vector<uint16_t> values;
};

inline Gray16 read_png16(const std::string& path) {
  Gray16 g;
  FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) {
    ADD_FAILURE() << "cannot open " << path;
    return g;
  }
  png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, nullptr, nullptr, nullptr);
  png_infop info = png_create_info_struct(png);
  if (setjmp(png_jmpbuf(png))) {
    png_destroy_read_struct(&png, &info, nullptr);
    std::fclose(f);
    ADD_FAILURE() << "bad PNG " << path;
    return Gray16{};
  }
  png_init_io(png, f);
  png_read_png(png, info, PNG_TRANSFORM_IDENTITY, nullptr);
  g.width = static_cast<int>(png_get_image_width(png, info));
  g.height = static_cast<int>(png_get_image_height(png, info));
  g.bit_depth = png_get_bit_depth(png, info);
  g.color_type = png_get_color_type(png, info);
  if (g.bit_depth == 16 && g.color_type == PNG_COLOR_TYPE_GRAY) {
    png_bytepp rows = png_get_rows(png, info);
    for (int y = 0; y < g.height; ++y)
      for (int x = 0; x < g.width; ++x)
        g.values.push_back(static_cast<uint16_t>((rows[y][2 * x] << 8) | rows[y][2 * x + 1]));
  }
  png_destroy_read_struct(&png, &info, nullptr);
  std::fclose(f);
  return g;
}

// A GLB checked against the glTF 2.0 container rules; `error` says what broke them.
struct Glb {
  nlohmann::json json;
  std::string bin;
  std::string error;  // empty = valid
  bool ok() const { return error.empty(); }

  // The elements of accessor `a` as float (any component type; normalized ones scaled to 1).
  std::vector<float> floats(int a) const {
    const auto& acc = json["accessors"][a];
    const auto& view = json["bufferViews"][acc["bufferView"].get<int>()];
    const int type = acc["componentType"];
    const size_t size = type == 5126 || type == 5125 ? 4 : 1;
    const size_t n = acc["count"].get<size_t>() * components(acc["type"]);
    const size_t at = view.value("byteOffset", size_t{0}) + acc.value("byteOffset", size_t{0});
    std::vector<float> out;
    for (size_t i = 0; i < n; ++i) {
      const char* p = bin.data() + at + i * size;
      if (type == 5126) {
        float f;
        std::memcpy(&f, p, 4);
        out.push_back(f);
      } else if (type == 5125) {
        uint32_t u;
        std::memcpy(&u, p, 4);
        out.push_back(float(u));
      } else {
        const uint8_t u = uint8_t(*p);
        out.push_back(acc.value("normalized", false) ? u / 255.0f : u);
      }
    }
    return out;
  }
  static size_t components(const std::string& type) {
    return type == "SCALAR" ? 1 : type == "VEC2" ? 2 : type == "VEC3" ? 3 : type == "VEC4" ? 4 : 0;
  }
};

inline Glb read_glb(const std::string& path) {
  Glb g;
  std::ifstream f(path, std::ios::binary);
  const std::string data((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  auto u32 = [&](size_t at) {
    uint32_t v = 0;
    if (at + 4 <= data.size()) std::memcpy(&v, data.data() + at, 4);
    return v;
  };
  if (data.size() < 20 || u32(0) != 0x46546C67 || u32(4) != 2) return g.error = "header", g;
  if (u32(8) != data.size()) return g.error = "length in the header", g;
  const uint32_t json_len = u32(12);
  if (u32(16) != 0x4E4F534A || json_len % 4 || 20 + size_t(json_len) > data.size())
    return g.error = "JSON chunk", g;
  const std::string text = data.substr(20, json_len);
  if (text.find('\0') != std::string::npos) return g.error = "JSON padding", g;  // spaces only
  if (!nlohmann::json::accept(text)) return g.error = "JSON text", g;
  g.json = nlohmann::json::parse(text);
  size_t at = 20 + json_len;
  if (at < data.size()) {
    const uint32_t bin_len = u32(at);
    if (u32(at + 4) != 0x004E4942 || bin_len % 4 || at + 8 + bin_len != data.size())
      return g.error = "BIN chunk", g;
    g.bin = data.substr(at + 8, bin_len);
  }
  if (g.json["asset"]["version"] != "2.0") return g.error = "asset version", g;
  const size_t buffer =
      g.json.contains("buffers") ? g.json["buffers"][0]["byteLength"].get<size_t>() : 0;
  if (buffer > g.bin.size() || g.bin.size() - buffer >= 4) return g.error = "buffer length", g;
  for (const auto& v : g.json.value("bufferViews", nlohmann::json::array()))
    if (v.value("byteOffset", size_t{0}) + v["byteLength"].get<size_t>() > buffer)
      return g.error = "buffer view out of the buffer", g;
  for (const auto& a : g.json.value("accessors", nlohmann::json::array())) {
    const auto& v = g.json["bufferViews"][a["bufferView"].get<int>()];
    const int type = a["componentType"];
    const size_t size = type == 5126 || type == 5125 ? 4 : 1;
    const size_t bytes = a["count"].get<size_t>() * Glb::components(a["type"]) * size;
    if (a["count"].get<size_t>() < 1 || bytes != v["byteLength"].get<size_t>() ||
        v.value("byteOffset", size_t{0}) % 4)
      return g.error = "accessor does not fill its view", g;
  }
  return g;
}

struct Npy {
  std::string descr, shape;  // "<f4", "(12, 20)"
  bool fortran_order = true;
  size_t data_offset = 0;
  std::vector<float> values;
  bool ok = false;
};

// NumPy format 1.0, parsed from its header dict like numpy.lib.format does (the fields we write).
inline Npy read_npy(const std::string& path) {
  Npy n;
  std::ifstream f(path, std::ios::binary);
  const std::string data((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  if (data.size() < 10 || data.compare(0, 8, std::string("\x93NUMPY\x01\x00", 8)) != 0) return n;
  const size_t len = uint8_t(data[8]) | size_t(uint8_t(data[9])) << 8;
  n.data_offset = 10 + len;
  if (n.data_offset > data.size() || data[n.data_offset - 1] != '\n') return n;
  const std::string dict = data.substr(10, len);
  auto field = [&](const std::string& key) {
    const size_t at = dict.find("'" + key + "': ");
    if (at == std::string::npos) return std::string();
    const size_t from = at + key.size() + 4;
    const size_t to = dict[from] == '(' ? dict.find(')', from) + 1 : dict.find(',', from);
    return dict.substr(from, to - from);
  };
  n.descr = field("descr");
  n.fortran_order = field("fortran_order") != "False";
  n.shape = field("shape");
  const size_t count = (data.size() - n.data_offset) / 4;
  n.values.resize(count);
  std::memcpy(n.values.data(), data.data() + n.data_offset, count * 4);
  n.ok = (data.size() - n.data_offset) % 4 == 0;
  return n;
}

}  // namespace lingbot::test
