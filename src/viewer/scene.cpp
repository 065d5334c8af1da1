#include "viewer/scene.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>

#include "lingbot/error.h"
#include "lingbot/result.h"

namespace lingbot::viewer {
namespace {

template <class T>
void put(std::string& out, const T& v) {
  out.append(reinterpret_cast<const char*>(&v), sizeof v);
}

uint32_t read_u32(const std::string& s, size_t at) {
  uint32_t v;
  std::memcpy(&v, s.data() + at, 4);
  return v;
}

Message binary(std::string s) {
  return {std::make_shared<const std::string>(std::move(s)), false};
}
Message text(const nlohmann::json& j) {
  return {std::make_shared<const std::string>(j.dump()), true};
}

}  // namespace

std::string encode_frame(const FrameResult& f, const Tensor* rgb, const PointOptions& options,
                         std::array<uint8_t, 3> colour, int64_t* points) {
  const FramePoints p = frame_points(f, rgb, options);
  const int64_t n = p.size();
  // Each frame's block gets its own offset and step: 16 bits over the frame's extent.
  float lo[3], step[3];
  for (int a = 0; a < 3; ++a) {
    float mn = n ? p.xyz[a] : 0, mx = mn;
    for (int64_t i = 0; i < n; ++i) {
      mn = std::min(mn, p.xyz[3 * i + a]);
      mx = std::max(mx, p.xyz[3 * i + a]);
    }
    lo[a] = mn;
    step[a] = mx > mn ? (mx - mn) / 65535.0f : 1.0f;
  }
  std::string out;
  out.reserve(kFrameHeaderBytes + 10 * n);
  put<uint32_t>(out, kFrame);
  put<uint32_t>(out, static_cast<uint32_t>(f.index));
  put<uint32_t>(out, (f.keyframe ? 1u : 0u) | (f.scale_frame ? 2u : 0u));
  put<uint32_t>(out, static_cast<uint32_t>(n));
  put<uint32_t>(out, static_cast<uint32_t>(f.width));
  put<uint32_t>(out, static_cast<uint32_t>(f.height));
  for (float v : f.c2w) put(out, v);
  for (float v : f.intrinsics) put(out, v);
  for (float v : lo) put(out, v);
  for (float v : step) put(out, v);
  out.append(reinterpret_cast<const char*>(colour.data()), 3);
  out.push_back(0);
  for (int64_t i = 0; i < 3 * n; ++i) {
    const int a = static_cast<int>(i % 3);
    const float q = std::round((p.xyz[i] - lo[a]) / step[a]) - 32768.0f;
    put<int16_t>(out, static_cast<int16_t>(std::clamp(q, -32768.0f, 32767.0f)));
  }
  out.append(reinterpret_cast<const char*>(p.rgb.data()), p.rgb.size());
  for (float c : p.confidence) {
    const float q = std::round(std::log(std::max(c, 1.0f)) * kConfScale);
    out.push_back(static_cast<char>(static_cast<uint8_t>(std::clamp(q, 0.0f, 255.0f))));
  }
  if (points) *points = n;
  return out;
}

std::string thin_frame(const std::string& m, int k) {
  const size_t n = read_u32(m, 12);
  const size_t kept = (n + k - 1) / k;
  std::string out = m.substr(0, kFrameHeaderBytes);
  const uint32_t count = static_cast<uint32_t>(kept);
  std::memcpy(out.data() + 12, &count, 4);
  out.reserve(kFrameHeaderBytes + 10 * kept);
  const char* q = m.data() + kFrameHeaderBytes;
  const char* rgb = q + 6 * n;
  const char* conf = rgb + 3 * n;
  for (size_t i = 0; i < n; i += k) out.append(q + 6 * i, 6);
  for (size_t i = 0; i < n; i += k) out.append(rgb + 3 * i, 3);
  for (size_t i = 0; i < n; i += k) out.push_back(conf[i]);
  return out;
}

std::string encode_image(int64_t index, const Tensor& rgb, int max_width) {
  LINGBOT_CHECK(rgb.rank() == 3 && rgb.dim(0) == 3, "viewer: a frame image must be [3, H, W]");
  LINGBOT_CHECK(rgb.dtype() == DType::U8 || rgb.dtype() == DType::F32,
                "viewer: a frame image must be U8 or F32");
  const int64_t h = rgb.dim(1), w = rgb.dim(2);
  // Nearest-neighbour down to max_width: a preview, not the data.
  const int64_t k = std::max<int64_t>(1, (w + max_width - 1) / std::max(1, max_width));
  const int64_t ow = w / k, oh = h / k;
  std::string out;
  out.reserve(16 + 3 * ow * oh);
  put<uint32_t>(out, kImage);
  put<uint32_t>(out, static_cast<uint32_t>(index));
  put<uint32_t>(out, static_cast<uint32_t>(ow));
  put<uint32_t>(out, static_cast<uint32_t>(oh));
  const bool u8 = rgb.dtype() == DType::U8;
  for (int64_t y = 0; y < oh; ++y)
    for (int64_t x = 0; x < ow; ++x)
      for (int64_t c = 0; c < 3; ++c) {
        const int64_t at = (c * h + y * k) * w + x * k;
        const float v = u8 ? rgb.data<uint8_t>()[at] : rgb.data<float>()[at] * 255.0f;
        out.push_back(static_cast<char>(static_cast<uint8_t>(std::clamp(v, 0.0f, 255.0f) + 0.5f)));
      }
  return out;
}

Scene::Scene(SceneOptions options) : options_(options) {
  std::lock_guard lock(mu_);
  update_status_locked();
}

Message Scene::hello_locked() const {
  return text({{"type", "hello"},
               {"source", source_},
               {"background", kViewBackground},
               {"threshold", options_.initial_threshold},
               {"min_confidence", options_.points.conf_threshold},
               {"stride", options_.points.stride},
               {"conf_scale", kConfScale}});
}

void Scene::update_status_locked() {
  status_ = text({{"type", "status"},
                  {"frames", frames_.size()},
                  {"points", points_},
                  {"expected", expected_},
                  {"finished", finished_},
                  {"thinned", thin_}});
  ++status_version_;
}

void Scene::update_colours_locked() {
  const int64_t count = std::max<int64_t>(expected_, static_cast<int64_t>(frames_.size()));
  std::string out;
  put<uint32_t>(out, kColours);
  put<uint32_t>(out, static_cast<uint32_t>(frames_.size()));
  for (size_t i = 0; i < frames_.size(); ++i) {
    const auto c = camera_colour(static_cast<int64_t>(i), count);
    out.append(reinterpret_cast<const char*>(c.data()), 3);
  }
  colours_ = binary(std::move(out));
  colours_count_ = frames_.size();
  ++colours_version_;
}

Message Scene::next(Cursor& c) {
  std::lock_guard lock(mu_);
  if (c.generation != generation_) {
    c = Cursor{.generation = generation_, .images = c.images};
    return hello_locked();
  }
  // The cloud first, in frame order; then only the newest of each update.
  if (c.next_frame < frames_.size()) return frames_[c.next_frame++];
  if (c.colours != colours_version_ && colours_) {
    c.colours = colours_version_;
    return colours_;
  }
  if (c.images && c.image != image_version_ && image_) {
    if (c.image && image_version_ > c.image + 1) images_skipped_ += image_version_ - c.image - 1;
    c.image = image_version_;
    return image_;
  }
  if (c.status != status_version_) {
    c.status = status_version_;
    return status_;
  }
  return {};
}

void Scene::reset(const std::string& source, int64_t expected_frames) {
  {
    std::lock_guard lock(mu_);
    ++generation_;
    source_ = source;
    expected_ = expected_frames;
    points_ = bytes_ = 0;
    thin_ = 1;
    finished_ = false;
    frames_.clear();
    image_ = colours_ = {};
    colours_count_ = 0;
    update_status_locked();
  }
  changed();
}

void Scene::add(const FrameResult& frame, const Tensor* rgb) {
  // Encoding happens outside the lock: the server's thread only ever waits for a push_back.
  int64_t n = 0;
  std::array<uint8_t, 3> colour;
  {
    std::lock_guard lock(mu_);
    const auto at = static_cast<int64_t>(frames_.size());  // colours go by position
    colour = camera_colour(at, std::max<int64_t>(expected_, at + 1));
  }
  std::string encoded = encode_frame(frame, rgb, options_.points, colour, &n);
  int thin;
  {
    std::lock_guard lock(mu_);
    thin = thin_;
  }
  if (thin > 1) {
    encoded = thin_frame(encoded, thin);
    n = read_u32(encoded, 12);
  }
  Message m = binary(std::move(encoded));
  Message image;
  if (rgb) image = binary(encode_image(frame.index, *rgb, options_.image_width));
  {
    std::lock_guard lock(mu_);
    frames_.push_back(m);
    points_ += n;
    bytes_ += static_cast<int64_t>(m.data->size());
    while (options_.max_bytes > 0 && bytes_ > options_.max_bytes && points_ > 0) thin_locked();
    if (image) {
      image_ = image;
      ++image_version_;
    }
    // Without a known length the colours are spread again as the run doubles.
    const size_t s = frames_.size();
    if (expected_ < static_cast<int64_t>(s) && (s & (s - 1)) == 0) update_colours_locked();
    update_status_locked();
  }
  changed();
}

// Halves every frame held. Browsers that have a frame keep the fuller version they were sent;
// those that join later get these. Rare (each time the cloud doubles past the limit) and
// linear in what is held, like a vector's growth, so it is done under the lock.
void Scene::thin_locked() {
  thin_ *= 2;
  points_ = bytes_ = 0;
  for (Message& f : frames_) {
    f = binary(thin_frame(*f.data, 2));
    points_ += read_u32(*f.data, 12);
    bytes_ += static_cast<int64_t>(f.data->size());
  }
}

void Scene::finish() {
  {
    std::lock_guard lock(mu_);
    finished_ = true;
    if (colours_count_ != frames_.size() || expected_ != static_cast<int64_t>(frames_.size()))
      update_colours_locked();
    update_status_locked();
  }
  changed();
}

void Scene::on_change(std::function<void()> f) {
  std::lock_guard lock(mu_);
  on_change_ = std::move(f);
}

void Scene::changed() {
  std::function<void()> f;
  {
    std::lock_guard lock(mu_);
    f = on_change_;
  }
  if (f) f();
}

int64_t Scene::frames() const {
  std::lock_guard lock(mu_);
  return static_cast<int64_t>(frames_.size());
}
int64_t Scene::points() const {
  std::lock_guard lock(mu_);
  return points_;
}
int64_t Scene::bytes() const {
  std::lock_guard lock(mu_);
  return bytes_;
}
int Scene::thinning() const {
  std::lock_guard lock(mu_);
  return thin_;
}
int64_t Scene::images_skipped() const {
  std::lock_guard lock(mu_);
  return images_skipped_;
}

}  // namespace lingbot::viewer
