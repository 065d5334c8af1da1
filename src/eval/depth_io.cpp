// Depth maps in: 16-bit PNGs (as depth datasets and our `depth` export store them), NumPy .npy
// arrays, folders of either, and a run's predictions.safetensors.
#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "eval/npy.h"
#include "io/image_codec.h"
#include "lingbot/error.h"
#include "lingbot/eval.h"
#include "lingbot/image.h"
#include "weights/safetensors.h"

namespace lingbot::eval {
namespace {

namespace fs = std::filesystem;

std::string read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw Error("cannot read " + path, ErrorKind::NotFound);
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

// One 16-bit greyscale PNG as depth: value / scale, 0 staying 0 (no depth). The decoder is the
// image reader's, with its guards against lying chunk lengths and sizes.
DepthMaps read_png_depth(const std::string& path, double scale) {
  const std::string bytes = read_bytes(path);
  const codec::GrayU16 png = codec::decode_png_gray16(
      reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), path, kMaxImagePixels);
  DepthMaps d;
  d.frames = 1;
  d.height = png.height;
  d.width = png.width;
  d.values.resize(png.values.size());
  for (size_t i = 0; i < d.values.size(); ++i)
    d.values[i] = static_cast<float>(png.values[i] / scale);
  return d;
}

DepthMaps read_npy_depth(const std::string& path, double scale) {
  const std::string bytes = read_bytes(path);
  Npy a = parse_npy(bytes, path);
  // [H, W], [S, H, W] or [S, H, W, 1] (the reference's depth layout).
  if (a.shape.size() == 4 && a.shape[3] == 1) a.shape.pop_back();
  if (a.shape.size() == 2) a.shape.insert(a.shape.begin(), 1);
  if (a.shape.size() != 3)
    throw Error(path + ": depth maps are [H, W] or [S, H, W], this array has " +
                    std::to_string(a.shape.size()) + " dimensions",
                ErrorKind::InvalidArgument);
  DepthMaps d;
  d.frames = a.shape[0];
  d.height = a.shape[1];
  d.width = a.shape[2];
  d.values.resize(a.values.size());
  // Integer arrays hold depth the way 16-bit PNGs do.
  const double k = a.integer ? 1.0 / scale : 1.0;
  for (size_t i = 0; i < a.values.size(); ++i) d.values[i] = static_cast<float>(a.values[i] * k);
  return d;
}

DepthMaps read_predictions_depth(const std::string& file) {
  const SafetensorsFile f = read_safetensors(file);
  auto it = f.tensors.find("depth");
  LINGBOT_CHECK(it != f.tensors.end(), file + " has no depth tensor");
  const Tensor& t = it->second;
  LINGBOT_CHECK(t.dtype() == DType::F32 && t.rank() == 3,
                file + ": depth is " + shape_str(t.shape()) + " " + dtype_name(t.dtype()) +
                    ", expected [S, H, W] F32");
  DepthMaps d;
  d.frames = t.dim(0);
  d.height = t.dim(1);
  d.width = t.dim(2);
  d.values.assign(t.data<float>(), t.data<float>() + t.numel());
  return d;
}

bool has_ext(const fs::path& p, const char* ext) {
  std::string e = p.extension().string();
  std::transform(e.begin(), e.end(), e.begin(), [](unsigned char c) { return std::tolower(c); });
  return e == ext;
}

}  // namespace

DepthMaps read_depth(const std::string& path, double png_scale) {
  LINGBOT_CHECK_ARG(png_scale > 0, "the depth PNG scale must be > 0");
  std::error_code ec;
  if (!fs::exists(path, ec)) throw Error("no depth file or folder: " + path, ErrorKind::NotFound);
  DepthMaps d;
  if (fs::is_directory(path, ec)) {
    const fs::path pred = fs::path(path) / "predictions.safetensors";
    if (fs::exists(pred, ec)) {
      d = read_predictions_depth(pred.string());
    } else {
      std::vector<std::string> files;
      for (const auto& e : fs::directory_iterator(path, ec))
        if (e.is_regular_file() && (has_ext(e.path(), ".png") || has_ext(e.path(), ".npy")))
          files.push_back(e.path().string());
      if (files.empty())
        throw Error(path + " holds no depth maps (.png or .npy) and no predictions.safetensors",
                    ErrorKind::InvalidArgument);
      std::sort(files.begin(), files.end(), natural_less);
      for (const std::string& f : files) {
        DepthMaps one =
            has_ext(f, ".png") ? read_png_depth(f, png_scale) : read_npy_depth(f, png_scale);
        if (d.frames == 0) {
          d.height = one.height;
          d.width = one.width;
        } else if (one.height != d.height || one.width != d.width) {
          throw Error(f + " is " + std::to_string(one.width) + "x" + std::to_string(one.height) +
                          ", the first map " + std::to_string(d.width) + "x" +
                          std::to_string(d.height),
                      ErrorKind::InvalidArgument);
        }
        d.frames += one.frames;
        d.values.insert(d.values.end(), one.values.begin(), one.values.end());
      }
    }
  } else if (has_ext(path, ".safetensors")) {
    d = read_predictions_depth(path);
  } else if (has_ext(path, ".npy")) {
    d = read_npy_depth(path, png_scale);
  } else if (has_ext(path, ".png")) {
    d = read_png_depth(path, png_scale);
  } else {
    throw Error(path + ": depth maps are .png (16-bit), .npy, predictions.safetensors or a folder",
                ErrorKind::InvalidArgument);
  }
  d.name = path;
  return d;
}

}  // namespace lingbot::eval
