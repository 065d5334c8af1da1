// predictions.safetensors, written as the run goes. The depth maps go straight into the final
// file's data (behind room reserved for the header) and the confidence maps into a second
// file; finish() appends the confidence, then the cameras kept in memory, and writes the header
// into its room. A long run so holds its maps on disk, not in memory, and only the confidence
// is copied once at the end.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <nlohmann/json.hpp>

#include "io/sinks/sink.h"
#include "io/sinks/sink_util.h"
#include "lingbot/error.h"
#include "weights/safetensors.h"

namespace lingbot {
namespace {

// The room for the header length and the JSON header: the data starts 4 KiB into the file, and
// the header of any run fits.
constexpr int64_t kHeaderRoom = 4096;

template <class T>
std::string_view bytes_of(const std::vector<T>& v) {
  return {reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T)};
}

// Appends the file `from` to `to`, giving each copied piece of `from` back to the file system
// where it can (hole punching), so that the disk does not hold the confidence maps twice.
void append_file(const std::string& from, sinks::OutFile& to) {
  const int fd = ::open(from.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) throw Error("cannot read " + from + ": " + std::strerror(errno));
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  std::string buf(8 << 20, '\0');
  for (off_t at = 0;;) {
    const ssize_t n = ::pread(fd, buf.data(), buf.size(), at);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw Error("cannot read " + from + ": " + std::strerror(errno));
    if (n == 0) return;
    to.write(std::string_view(buf.data(), static_cast<size_t>(n)));
    (void)::fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, at, n);  // best effort
    at += n;
  }
}

// [R | t] -> [R^T | -R^T t], row-major 3x4.
std::array<float, 12> rigid_inverse(const std::array<float, 12>& m) {
  std::array<float, 12> inv{};
  for (int a = 0; a < 3; ++a) {
    double t = 0;
    for (int b = 0; b < 3; ++b) {
      inv[a * 4 + b] = m[b * 4 + a];
      t -= static_cast<double>(m[b * 4 + a]) * m[b * 4 + 3];
    }
    inv[a * 4 + 3] = static_cast<float>(t);
  }
  return inv;
}

}  // namespace

struct PredictionsWriter::State {
  explicit State(const std::string& path)
      : path(path),
        data_path(path + ".partial"),
        conf_path(path + ".conf.partial"),
        data(data_path, true),
        conf(conf_path, true) {
    data.write(std::string(kHeaderRoom, ' '));
  }
  void discard() {
    std::remove(data_path.c_str());
    std::remove(conf_path.c_str());
  }

  std::string path, data_path, conf_path;
  sinks::OutFile data, conf;
  bool done = false;
  int64_t frames = 0, h = 0, w = 0;
  std::vector<float> pose, c2w, w2c, k;
  std::vector<uint8_t> frame_type, is_keyframe;
  std::mutex windows_m;  // add_window's thread against finish's
  std::vector<float> chunk_scales, chunk_transforms;
  bool windowed = false;
  std::vector<std::array<float, 12>> optimized_c2w;  // set_optimized, under windows_m
  std::vector<float> optimized_scale;
  bool optimized = false;
};

PredictionsWriter::PredictionsWriter(const std::string& path) {
  try {
    s_ = std::make_unique<State>(path);
  } catch (...) {  // the first file may have been made before the second failed
    std::remove((path + ".partial").c_str());
    throw;
  }
}

PredictionsWriter::~PredictionsWriter() {
  if (!s_->done) s_->discard();
}

void PredictionsWriter::add(const FrameResult& r, const Tensor*) {
  State& s = *s_;
  LINGBOT_CHECK(!s.done, "PredictionsWriter::add after finish");
  sinks::check_result(r);
  if (s.frames == 0) {
    s.h = r.height;
    s.w = r.width;
  }
  LINGBOT_CHECK(r.height == s.h && r.width == s.w,
                "all frames of a run must have one size: frame " + std::to_string(r.index) +
                    " is " + std::to_string(r.width) + "x" + std::to_string(r.height) +
                    ", the first " + std::to_string(s.w) + "x" + std::to_string(s.h));
  s.data.write(bytes_of(r.depth));
  s.conf.write(bytes_of(r.confidence));
  ++s.frames;
  s.pose.insert(s.pose.end(), r.pose_enc.begin(), r.pose_enc.end());
  s.c2w.insert(s.c2w.end(), r.c2w.begin(), r.c2w.end());
  s.w2c.insert(s.w2c.end(), r.w2c.begin(), r.w2c.end());
  s.k.insert(s.k.end(), r.intrinsics.begin(), r.intrinsics.end());
  s.frame_type.push_back(r.scale_frame ? 0 : r.keyframe ? 1 : 2);
  s.is_keyframe.push_back(r.keyframe ? 1 : 0);
}

void PredictionsWriter::add_window(const WindowAlignment& w) {
  std::lock_guard lock(s_->windows_m);
  s_->windowed = true;
  s_->chunk_scales.push_back(w.scale);
  s_->chunk_transforms.insert(s_->chunk_transforms.end(), w.transform.begin(), w.transform.end());
}

void PredictionsWriter::set_optimized(std::vector<std::array<float, 12>> c2w,
                                      std::vector<float> scale) {
  LINGBOT_CHECK(c2w.size() == scale.size(), "set_optimized: one scale per pose");
  std::lock_guard lock(s_->windows_m);
  s_->optimized = true;
  s_->optimized_c2w = std::move(c2w);
  s_->optimized_scale = std::move(scale);
}

void PredictionsWriter::finish() {
  State& s = *s_;
  if (s.done) return;
  s.done = true;
  try {
    if (s.frames == 0) {
      s.discard();
      return;
    }
    std::lock_guard lock(s.windows_m);
    s.conf.close();
    append_file(s.conf_path, s.data);
    // Data order: the maps first (already there), then the float arrays, then the byte arrays,
    // so that every tensor starts aligned to its element size.
    const Shape plane{s.frames, s.h, s.w};
    const int64_t nw = static_cast<int64_t>(s.chunk_scales.size());
    struct Entry {
      const char* name;
      DType dtype;
      Shape shape;
      size_t size;
      std::string_view bytes;  // what to append; the maps are in the file already
    };
    const size_t map_bytes = static_cast<size_t>(s.frames * s.h * s.w) * 4;
    auto array = [](const char* name, DType dtype, Shape shape, std::string_view bytes) {
      return Entry{name, dtype, std::move(shape), bytes.size(), bytes};
    };
    std::vector<Entry> entries{{"depth", DType::F32, plane, map_bytes, {}},
                               {"depth_conf", DType::F32, plane, map_bytes, {}},
                               array("pose_enc", DType::F32, {s.frames, 9}, bytes_of(s.pose)),
                               array("c2w", DType::F32, {s.frames, 3, 4}, bytes_of(s.c2w)),
                               array("w2c", DType::F32, {s.frames, 3, 4}, bytes_of(s.w2c)),
                               array("intrinsics", DType::F32, {s.frames, 3, 3}, bytes_of(s.k))};
    // The loop-closed poses: every frame's, those not given keeping their streamed pose.
    std::vector<float> opt_c2w, opt_w2c, opt_scale;
    if (s.optimized) {
      opt_c2w.assign(s.c2w.begin(), s.c2w.end());
      opt_w2c.assign(s.w2c.begin(), s.w2c.end());
      opt_scale.assign(static_cast<size_t>(s.frames), 1.0f);
      const size_t n = std::min(s.optimized_c2w.size(), static_cast<size_t>(s.frames));
      for (size_t i = 0; i < n; ++i) {
        const auto& m = s.optimized_c2w[i];
        std::copy(m.begin(), m.end(), opt_c2w.begin() + 12 * i);
        // A pose the closure left as streamed keeps the model's own inverse, bit for bit.
        if (!std::equal(m.begin(), m.end(), s.c2w.begin() + 12 * i)) {
          const auto inv = rigid_inverse(m);
          std::copy(inv.begin(), inv.end(), opt_w2c.begin() + 12 * i);
        }
        opt_scale[i] = s.optimized_scale[i];
      }
      entries.push_back(array("c2w_optimized", DType::F32, {s.frames, 3, 4}, bytes_of(opt_c2w)));
      entries.push_back(array("w2c_optimized", DType::F32, {s.frames, 3, 4}, bytes_of(opt_w2c)));
      entries.push_back(array("scale_optimized", DType::F32, {s.frames}, bytes_of(opt_scale)));
    }
    if (s.windowed) {
      entries.push_back(array("chunk_scales", DType::F32, {nw}, bytes_of(s.chunk_scales)));
      entries.push_back(
          array("chunk_transforms", DType::F32, {nw, 4, 4}, bytes_of(s.chunk_transforms)));
    }
    entries.push_back(array("frame_type", DType::U8, {s.frames}, bytes_of(s.frame_type)));
    entries.push_back(array("is_keyframe", DType::Bool, {s.frames}, bytes_of(s.is_keyframe)));

    nlohmann::ordered_json header = nlohmann::ordered_json::object();
    header["__metadata__"] = {{"pose_convention", "c2w = [R(q)|t], OpenCV camera axes"}};
    if (s.windowed) header["__metadata__"]["mode"] = "windowed";
    uint64_t offset = 0;
    for (const Entry& e : entries) {
      header[e.name] = {{"dtype", dtype_name(e.dtype)},
                        {"shape", e.shape},
                        {"data_offsets", {offset, offset + e.size}}};
      offset += e.size;
      s.data.write(e.bytes);
    }
    s.data.write_at(0, safetensors_prefix(header.dump(), kHeaderRoom));
    s.data.close();
    if (std::rename(s.data_path.c_str(), s.path.c_str()) != 0)
      throw Error("cannot write " + s.path + ": " + std::strerror(errno));
    std::remove(s.conf_path.c_str());
  } catch (...) {
    s.discard();
    throw;
  }
}

}  // namespace lingbot
