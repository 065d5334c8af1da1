// Cameras for photogrammetry and neural-rendering tools: a COLMAP text model and nerfstudio's
// transforms.json.
//
// Both tools put pixel centres at half-integer coordinates, while the principal point from
// the pose encoding belongs to the viewer's unprojection, where pixel u sits at u
// (the reference's viewer). Exported principal points are therefore shifted by half a pixel, so
// that projecting an exported 3D point lands on the centre of the pixel it was unprojected from.
#include <charconv>
#include <nlohmann/json.hpp>
#include <utility>

#include "io/sinks/sink.h"
#include "io/sinks/sink_util.h"

namespace lingbot {
namespace {

using sinks::fmt;

// Principal point in the convention of pixel centres at half-integers (see the top).
float centred(float c) {
  return c + 0.5f;
}

class ColmapSink : public ResultSink {
 public:
  std::string name() const override { return "colmap"; }
  bool refers_to_earlier() const override { return true; }
  ColmapSink(const std::string& dir, PointOptions o, FrameNamer name)
      : o_(o),
        name_(std::move(name)),
        cameras_((sinks::make_folder(dir), dir + "/cameras.txt"), false),
        images_(dir + "/images.txt", false),
        points_(dir + "/points3D.txt", false) {
    LINGBOT_CHECK(o_.stride >= 1, "the point stride must be at least 1");
    cameras_.write(
        "# Camera list with one line of data per camera:\n"
        "#   CAMERA_ID, MODEL, WIDTH, HEIGHT, PARAMS[]\n");
    images_.write(
        "# Image list with two lines of data per image:\n"
        "#   IMAGE_ID, QW, QX, QY, QZ, TX, TY, TZ, CAMERA_ID, NAME\n"
        "#   POINTS2D[] as (X, Y, POINT3D_ID)\n");
    points_.write(
        "# 3D point list with one line of data per point:\n"
        "#   POINT3D_ID, X, Y, Z, R, G, B, ERROR, TRACK[] as (IMAGE_ID, POINT2D_IDX)\n");
    flush();
  }

  void add(const FrameResult& r, const Tensor* rgb) override {
    sinks::check_result(r);
    if (!sinks::finite_camera(r)) {  // "inf" is no focal length COLMAP can read
      ++skipped_.frames;
      return;
    }
    // COLMAP ids start at 1; each frame has its own camera because intrinsics vary per frame.
    const std::string id = std::to_string(r.index + 1);
    const auto& k = r.intrinsics;
    cameras_.write(id + " PINHOLE " + std::to_string(r.width) + " " + std::to_string(r.height) +
                   " " + fmt(k[0]) + " " + fmt(k[4]) + " " + fmt(centred(k[2])) + " " +
                   fmt(centred(k[5])) + "\n");
    // COLMAP poses are world-to-camera.
    const auto q = sinks::rotation_to_quaternion(r.w2c);
    images_.write(id + " " + fmt(q[3]) + " " + fmt(q[0]) + " " + fmt(q[1]) + " " + fmt(q[2]) + " " +
                  fmt(r.w2c[3]) + " " + fmt(r.w2c[7]) + " " + fmt(r.w2c[11]) + " " + id + " " +
                  name_(r.index) + "\n\n");
    // Formatted in place: a frame has thousands of points.
    lines_.clear();
    voxels_.start_frame(r);
    skipped_.points += sinks::for_each_point(r, rgb, o_, [&](const sinks::Point& p) {
      if (!voxels_.keep(p)) return;
      char b[128], *e = b + sizeof b;
      char* c = std::to_chars(b, e, ++next_point_).ptr;
      for (float v : {p.x, p.y, p.z}) {
        *c++ = ' ';
        c = std::to_chars(c, e, v).ptr;
      }
      for (uint8_t v : p.rgb) {
        *c++ = ' ';
        c = std::to_chars(c, e, static_cast<int>(v)).ptr;
      }
      lines_.append(b, c).append(" 0\n");
    });
    points_.write(lines_);
    flush();
  }

  void finish() override {
    cameras_.close();
    images_.close();
    points_.close();
  }
  std::string notes() const override { return skipped_.note(name()); }

 private:
  void flush() {
    cameras_.flush();
    images_.flush();
    points_.flush();
  }

  PointOptions o_;
  sinks::VoxelFilter voxels_{o_};
  FrameNamer name_;
  sinks::OutFile cameras_, images_, points_;
  int64_t next_point_ = 0;
  std::string lines_;
  sinks::Skipped skipped_;
};

// transforms.json stays valid JSON after every frame: the closing brackets are overwritten by
// the next frame and written again after it.
class NerfstudioSink : public ResultSink {
 public:
  std::string name() const override { return "nerfstudio"; }
  bool refers_to_earlier() const override { return true; }
  NerfstudioSink(const std::string& path, NerfstudioOptions o, FrameNamer name)
      : file_(path, false), o_(std::move(o)), name_(std::move(name)) {
    std::string head = "{\n  \"camera_model\": \"OPENCV\",\n";
    if (!o_.ply_file.empty())
      head += "  \"ply_file_path\": " + nlohmann::json(o_.ply_file).dump() + ",\n";
    head += "  \"frames\": [";
    file_.write(head + kTail);
    file_.flush();
  }

  void add(const FrameResult& r, const Tensor*) override {
    if (!sinks::finite_camera(r)) {  // JSON has no inf: it would be written as null
      ++skipped_.frames;
      return;
    }
    // nerfstudio cameras look down -z with y up (OpenGL): the camera's y and z axes flip.
    const auto& m = r.c2w;
    nlohmann::ordered_json t = nlohmann::ordered_json::array();
    for (int row = 0; row < 3; ++row)
      t.push_back(
          {tidy(m[row * 4]), tidy(-m[row * 4 + 1]), tidy(-m[row * 4 + 2]), tidy(m[row * 4 + 3])});
    t.push_back({0, 0, 0, 1});
    const auto& k = r.intrinsics;
    const std::string name = name_(r.index);
    nlohmann::ordered_json f;
    f["file_path"] = o_.image_dir + "/" + name;
    if (!o_.depth_dir.empty()) f["depth_file_path"] = o_.depth_dir + "/" + name;
    f["transform_matrix"] = t;
    f["fl_x"] = tidy(k[0]);
    f["fl_y"] = tidy(k[4]);
    f["cx"] = tidy(centred(k[2]));
    f["cy"] = tidy(centred(k[5]));
    f["w"] = r.width;
    f["h"] = r.height;
    const std::string entry = (frames_++ ? ",\n    " : "\n    ") + f.dump() + kTail;
    file_.write_at(file_.size() - static_cast<int64_t>(sizeof kTail - 1), entry);
    file_.flush();
  }

  void finish() override { file_.close(); }
  std::string notes() const override { return skipped_.note(name()); }

 private:
  static constexpr char kTail[] = "\n  ]\n}\n";
  // Shortest decimal of the float, read back as double: "0.1", not 0.10000000149011612.
  static double tidy(double v) { return std::stod(fmt(static_cast<float>(v))); }

  sinks::OutFile file_;
  NerfstudioOptions o_;
  FrameNamer name_;
  int64_t frames_ = 0;
  sinks::Skipped skipped_;
};

}  // namespace

std::unique_ptr<ResultSink> make_colmap_sink(const std::string& dir, PointOptions options,
                                             FrameNamer name) {
  return std::make_unique<ColmapSink>(dir, options, name ? std::move(name) : default_frame_name);
}

std::unique_ptr<ResultSink> make_nerfstudio_sink(const std::string& path, NerfstudioOptions options,
                                                 FrameNamer name) {
  return std::make_unique<NerfstudioSink>(path, std::move(options),
                                          name ? std::move(name) : default_frame_name);
}

}  // namespace lingbot
