// `lingbot-map render`: a finished run as a fly-through video (or PNG frames), on the CPU.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>

#include "commands.h"
#include "lingbot/error.h"
#include "lingbot/render.h"
#include "lingbot/result.h"
#include "pipeline.h"

namespace lingbot::cli {
namespace {

struct RenderArgs {
  std::string result, out = "fly.mp4", camera = "follow", size = "1280x720";
  RenderOptions options;
  int fps = 10;
  bool quiet = false;
};

int run_render(RenderArgs a) {
  const auto t0 = std::chrono::steady_clock::now();
  std::tie(a.options.width, a.options.height) = parse_render_size(a.size);
  a.options.camera = parse_camera_path(a.camera);
  const RunResult run = read_result(a.result);
  // Frames named frame_NNNNNN.png written over the run's own input pictures would lose them.
  std::error_code ec;
  if (std::filesystem::equivalent(a.out, std::filesystem::path(run.dir) / "images", ec))
    throw Error("--out " + a.out + " is the result's images folder, which render reads",
                ErrorKind::InvalidArgument);
  const Renderer renderer(run, a.options);
  const auto t1 = std::chrono::steady_clock::now();
  const bool tty = !a.quiet && isatty(fileno(stderr));
  const RenderedVideo v = write_video(renderer, a.out, a.fps, [&](int64_t done, int64_t total) {
    if (tty) std::fprintf(stderr, "\rrendering %lld/%lld", (long long)done, (long long)total);
  });
  if (tty) std::fputc('\n', stderr);
  using secs = std::chrono::duration<double>;
  const double prepare = secs(t1 - t0).count(),
               draw = secs(std::chrono::steady_clock::now() - t1).count();
  std::printf(
      "render: %lld frames %dx%d (camera %s) in %.1f s, %.0f ms/frame; %lld points read in %.1f "
      "s\n",
      static_cast<long long>(v.frames), a.options.width, a.options.height, a.camera.c_str(), draw,
      1000 * draw / static_cast<double>(v.frames), static_cast<long long>(renderer.points()),
      prepare);
  if (v.video)
    std::printf("  video: %s (%s, %d frames/s)\n", v.path.c_str(), v.codec.c_str(), a.fps);
  else
    std::printf("  frames: %s/frame_NNNNNN.png%s\n", v.path.c_str(),
                video_encoding_supported() ? "" : " (this build has no video encoder)");
  return 0;
}

}  // namespace

void add_render(CLI::App& app) {
  auto a = std::make_shared<RenderArgs>();
  CLI::App* sub = app.add_subcommand(
      "render",
      "Draw a finished run as a fly-through video (points growing along the trajectory, camera "
      "frustums) on the CPU");
  sub->add_option("result", a->result, "result folder (holding predictions.safetensors)")
      ->required();
  sub->add_option("--out", a->out,
                  "video file (.mp4, .mkv, .mov, .avi, .webm; needs FFmpeg, else PNG frames in the "
                  "folder of that name less its extension) or a folder for PNG frames")
      ->capture_default_str();
  sub->add_option("--camera", a->camera,
                  "follow (behind and above the current camera), birdeye (from above) or static "
                  "(one overview)")
      ->capture_default_str()
      ->check(CLI::IsMember({"follow", "birdeye", "static"}));
  sub->add_option("--size", a->size, "picture size WxH (even sides)")->capture_default_str();
  sub->add_option("--fps", a->fps, "video frame rate")
      ->capture_default_str()
      ->check(CLI::Range(1, 240));
  sub->add_option("--frames", a->options.frames,
                  "video length in frames (default: one per result frame, at most " +
                      std::to_string(kMaxAutoFrames) + ", longer runs stepped through evenly)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  sub->add_option("--point-size", a->options.point_size,
                  "splat size, 1 = a point covers the pixels it stands for")
      ->capture_default_str()
      ->check(kPositive);
  sub->add_option("--conf-threshold", a->options.points.conf_threshold,
                  "points need a confidence above this")
      ->capture_default_str();
  sub->add_option("--point-stride", a->options.points.stride,
                  "points from every N-th pixel in x and y")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 16));
  sub->add_option("--max-points-per-frame", a->options.max_points_per_frame,
                  "each frame's points are thinned evenly to at most this many")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 40));
  sub->add_option("--max-points", a->options.max_points,
                  "and all frames' together to at most this many (bounds memory and time for "
                  "long runs: about 16 bytes a point)")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 40));
  sub->add_flag("--quiet", a->quiet, "no progress line");
  commands().push_back({sub, [a] { return run_render(*a); }});
}

}  // namespace lingbot::cli
