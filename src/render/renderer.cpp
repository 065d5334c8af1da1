// lingbot::Renderer: the run's points thinned once up front, then each video frame drawn from
// scratch (points of the frames reached so far, trajectory, frustums) from the planned camera.
#include <algorithm>
#include <cmath>

#include "lingbot/error.h"
#include "lingbot/render.h"
#include "render/camera_path.h"
#include "render/parallel.h"
#include "render/raster.h"

namespace lingbot {

using render::Vec3;
using render::operator-;

struct Renderer::Impl {
  RenderOptions options;
  int64_t result_frames = 0, video_frames = 0;
  render::PointCloud cloud;                   // frame by frame, in frame order
  std::vector<int64_t> ends;                  // points of frames [0, i] are [0, ends[i])
  std::vector<std::array<Vec3, 5>> frustums;  // apex and image corners at kFrustumDepth
  std::vector<render::Rgb> colours;           // camera_colour per frame
  int64_t frustum_step = 1;                   // every k-th frame's frustum (and the current one)
  std::unique_ptr<render::CameraPlan> plan;

  static constexpr float kFrustumDepth = 0.12f;  // in scene depths (or width, if larger)
  static constexpr int64_t kMaxFrustums = 100;

  double position(int64_t t) const {
    return video_frames > 1 ? double(t) * double(result_frames - 1) / double(video_frames - 1)
                            : double(result_frames - 1);
  }
};

namespace {

// The points of one frame, thinned evenly to `cap`, with each point's footprint: the world size
// of the stride x stride pixels it stands for (grown by the thinning), at its depth; and the
// depths of a few of them, for the scene's scale.
struct FramePart {
  render::PointCloud cloud;
  std::vector<float> depths;
};

FramePart frame_part(const RunResult& run, int64_t i, const FrameNamer& names,
                     const RenderOptions& o, int64_t cap) {
  const FrameResult f = result_frame(run, i);
  const std::optional<Tensor> rgb = read_result_image(run, i, names);
  const FramePoints p = frame_points(f, rgb ? &*rgb : nullptr, o.points);
  const int64_t n = p.size();
  const int64_t kept = std::min(n, cap);
  const float grow = kept > 0 ? static_cast<float>(std::sqrt(double(n) / double(kept))) : 1;
  const float pixel = o.points.stride / std::max(std::fabs(f.intrinsics[0]), 1e-6f);
  const auto& m = f.w2c;
  FramePart part;
  render::PointCloud& c = part.cloud;
  for (int64_t j = 0; j < kept; ++j) {
    const size_t k = static_cast<size_t>(j * n / kept);  // evenly over the frame
    const float* x = &p.xyz[3 * k];
    const float z = std::fabs(m[8] * x[0] + m[9] * x[1] + m[10] * x[2] + m[11]);
    const float footprint = z * pixel * grow;
    c.xyz.insert(c.xyz.end(), x, x + 3);
    c.rgb.insert(c.rgb.end(), &p.rgb[3 * k], &p.rgb[3 * k] + 3);
    c.footprint.push_back(std::isfinite(footprint) ? footprint : 0);  // else one pixel
  }
  const int64_t every = std::max<int64_t>(1, kept / 64);
  for (int64_t k = 0; k < kept; k += every) {
    const float* x = &c.xyz[3 * k];
    const float z = std::fabs(m[8] * x[0] + m[9] * x[1] + m[10] * x[2] + m[11]);
    if (z > 0 && std::isfinite(z)) part.depths.push_back(z);
  }
  return part;
}

// A camera's apex and image corners in the world: the image plane at depth `size`, or nearer
// for a wide camera, so that no frustum is larger than `size` in any direction.
std::array<Vec3, 5> frustum(const FrameResult& f, float size) {
  const auto& c = f.c2w;
  auto world = [&](float x, float y, float z) -> Vec3 {
    return {c[0] * x + c[1] * y + c[2] * z + c[3], c[4] * x + c[5] * y + c[6] * z + c[7],
            c[8] * x + c[9] * y + c[10] * z + c[11]};
  };
  const float fx = f.intrinsics[0], cx = f.intrinsics[2], fy = f.intrinsics[4],
              cy = f.intrinsics[5], w = float(f.width), h = float(f.height);
  const float spread = std::max({1.0f, std::fabs(cx / fx), std::fabs((w - cx) / fx),
                                 std::fabs(cy / fy), std::fabs((h - cy) / fy)});
  const float d = size / (std::isfinite(spread) ? spread : 1.0f);
  auto corner = [&](float u, float v) { return world((u - cx) / fx * d, (v - cy) / fy * d, d); };
  return {world(0, 0, 0), corner(0, 0), corner(w, 0), corner(w, h), corner(0, h)};
}

// The scene's scale (the median of the sampled depths; without points, the trajectory's
// extent) and bounds (from at most 65536 of the points).
void measure_scene(render::Scene& scene, std::vector<float>& depths,
                   const render::PointCloud& cloud) {
  if (!depths.empty()) {
    std::nth_element(depths.begin(), depths.begin() + depths.size() / 2, depths.end());
    scene.depth = depths[depths.size() / 2];
  }
  if (!(scene.depth > 0) || !std::isfinite(scene.depth)) {
    float extent = 0;
    for (const Vec3& c : scene.centres)
      extent = std::max(extent, render::norm(c - scene.centres[0]));
    scene.depth = extent > 0 ? extent : 1;
  }
  std::vector<float> sample;
  const int64_t n = cloud.size(), every = std::max<int64_t>(1, n / 65536);
  for (int64_t i = 0; i < n; i += every)
    sample.insert(sample.end(), &cloud.xyz[3 * i], &cloud.xyz[3 * i] + 3);
  render::set_bounds(scene, sample);
}

}  // namespace

Renderer::Renderer(const RunResult& run, const RenderOptions& o) : impl_(std::make_unique<Impl>()) {
  LINGBOT_CHECK_ARG(!run.frames.empty(), "the result in " + run.dir + " holds no frames");
  LINGBOT_CHECK_ARG(o.width >= 16 && o.height >= 16 && o.width <= 4096 && o.height <= 4096,
                    "the picture must be 16x16 to 4096x4096, got " + std::to_string(o.width) + "x" +
                        std::to_string(o.height));
  LINGBOT_CHECK_ARG(o.frames >= 0, "the frame count must not be negative");
  LINGBOT_CHECK_ARG(o.fov_y_degrees > 1 && o.fov_y_degrees < 170,
                    "the field of view must be between 1 and 170 degrees");
  LINGBOT_CHECK_ARG(o.point_size > 0 && std::isfinite(o.point_size),
                    "the point size must be positive");
  LINGBOT_CHECK_ARG(o.points.stride >= 1, "the point stride must be at least 1");
  LINGBOT_CHECK_ARG(o.max_points_per_frame >= 1 && o.max_points >= 1,
                    "the point limits must be at least 1");
  Impl& m = *impl_;
  m.options = o;
  const int64_t s = static_cast<int64_t>(run.frames.size());
  m.result_frames = s;
  m.video_frames = o.frames > 0 ? o.frames : std::min(s, kMaxAutoFrames);

  // Points, frame by frame on all threads; the first failure (an unreadable image) is thrown.
  const int64_t cap = std::max<int64_t>(1, std::min(o.max_points_per_frame, o.max_points / s));
  const FrameNamer names = result_image_names(run);
  std::vector<FramePart> parts(static_cast<size_t>(s));
  render::parallel_for(
      s, [&](int64_t i) { parts[static_cast<size_t>(i)] = frame_part(run, i, names, o, cap); });
  render::Scene scene;
  std::vector<float> depths;
  for (int64_t i = 0; i < s; ++i) {
    FramePart& part = parts[static_cast<size_t>(i)];
    const render::PointCloud& p = part.cloud;
    m.cloud.xyz.insert(m.cloud.xyz.end(), p.xyz.begin(), p.xyz.end());
    m.cloud.rgb.insert(m.cloud.rgb.end(), p.rgb.begin(), p.rgb.end());
    m.cloud.footprint.insert(m.cloud.footprint.end(), p.footprint.begin(), p.footprint.end());
    m.ends.push_back(m.cloud.size());
    depths.insert(depths.end(), part.depths.begin(), part.depths.end());
    part = {};
    const auto& c = run.frames[static_cast<size_t>(i)].c2w;
    // A camera with non-finite numbers stays where the one before it was.
    const Vec3 centre{c[3], c[7], c[11]};
    const bool finite = std::isfinite(centre[0] + centre[1] + centre[2]);
    scene.centres.push_back(finite                  ? centre
                            : scene.centres.empty() ? Vec3{0, 0, 0}
                                                    : scene.centres.back());
    scene.forwards.push_back(render::normalized({c[2], c[6], c[10]}, {0, 0, 1}));
  }
  measure_scene(scene, depths, m.cloud);

  const float frustum_size = Impl::kFrustumDepth * scene.depth;
  for (int64_t i = 0; i < s; ++i) {
    m.frustums.push_back(frustum(run.frames[static_cast<size_t>(i)], frustum_size));
    m.colours.push_back(camera_colour(i, s));
  }
  m.frustum_step = std::max<int64_t>(1, (s + Impl::kMaxFrustums - 1) / Impl::kMaxFrustums);
  m.plan = std::make_unique<render::CameraPlan>(
      std::move(scene), o.camera, o.width, o.height,
      o.fov_y_degrees * static_cast<float>(M_PI) / 180.0f,
      m.video_frames > 1 ? double(s - 1) / double(m.video_frames - 1) : 1.0);
}

Renderer::~Renderer() = default;

int64_t Renderer::frames() const {
  return impl_->video_frames;
}
int64_t Renderer::points() const {
  return impl_->cloud.size();
}
const RenderOptions& Renderer::options() const {
  return impl_->options;
}

int64_t Renderer::result_frame(int64_t t) const {
  LINGBOT_CHECK_ARG(t >= 0 && t < impl_->video_frames, "video frame " + std::to_string(t) +
                                                           " is not in 0.." +
                                                           std::to_string(impl_->video_frames - 1));
  return std::llround(impl_->position(t));
}

ImageU8 Renderer::render(int64_t t) const {
  const Impl& m = *impl_;
  const int64_t r = result_frame(t);
  const render::View view = m.plan->at(m.position(t));
  render::Canvas canvas(m.options.width, m.options.height, kViewBackground);
  canvas.draw_points(view, m.cloud, m.ends[static_cast<size_t>(r)], m.options.point_size);
  canvas.resolve();
  if (m.options.trajectory) {
    const auto& c = m.plan->scene().centres;
    for (int64_t i = 1; i <= r; ++i)
      canvas.draw_line(view, c[static_cast<size_t>(i - 1)], c[static_cast<size_t>(i)],
                       m.colours[static_cast<size_t>(i)]);
  }
  if (m.options.frustums) {
    for (int64_t i = 0; i <= r; ++i) {
      if (i % m.frustum_step != 0 && i != r) continue;
      const auto& f = m.frustums[static_cast<size_t>(i)];
      const render::Rgb col = m.colours[static_cast<size_t>(i)];
      for (int k = 1; k <= 4; ++k) {
        canvas.draw_line(view, f[0], f[k], col);
        canvas.draw_line(view, f[k], f[k % 4 + 1], col);
      }
    }
  }
  return canvas.image();
}

}  // namespace lingbot
