// `lingbot-map demo`: the whole pipeline with nothing to download: synthetic weights and a
// procedurally rendered video with known camera motion.
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>

#include "commands.h"
#include "lingbot/error.h"
#include "lingbot/image.h"
#include "lingbot/render.h"
#include "lingbot/result.h"
#include "pipeline.h"

namespace lingbot::cli {
namespace {

struct DemoArgs {
  EngineOptions engine{.model = "synthetic:1",
                       .arch = ""};  // "": tiny on the CPU, released on a GPU
  StreamOptions stream{.scale_frames = 4, .window = 16};
  int frames = 24, width = 140, height = 112;
  int64_t max_special_frames = -1;  // -1: auto (64 beyond 320 frames, else all)
  std::string out = "lingbot-demo";
  bool quiet = false, no_render = false;
  ExportArgs exports{.formats = "all"};
};

// A camera sliding and turning in front of a textured wall and floor; returns RGB bytes.
ImageU8 render_frame(int index, int width, int height) {
  ImageU8 img{width, height, std::vector<uint8_t>(static_cast<size_t>(width) * height * 3)};
  const double t = index * 0.05, yaw = 0.15 * std::sin(t), f = 0.9 * width;
  const double cx = 0.6 * std::sin(0.7 * t), cy = -0.2, cz = t;  // camera centre (y down)
  for (int v = 0; v < height; ++v)
    for (int u = 0; u < width; ++u) {
      const double rx = (u + 0.5 - width / 2.0) / f, ry = (v + 0.5 - height / 2.0) / f;
      const double dx = std::cos(yaw) * rx + std::sin(yaw), dy = ry,
                   dz = -std::sin(yaw) * rx + std::cos(yaw);
      double hit = 1e9, a = 0, b = 0;
      int surface = 0;
      if (dz > 1e-6) {  // wall at z = 6
        const double s = (6.0 - cz) / dz;
        if (s > 0 && s < hit) hit = s, a = cx + s * dx, b = cy + s * dy, surface = 1;
      }
      if (dy > 1e-6) {  // floor at y = 1
        const double s = (1.0 - cy) / dy;
        if (s > 0 && s < hit) hit = s, a = cx + s * dx, b = cz + s * dz, surface = 2;
      }
      uint8_t* px = &img.rgb[(static_cast<size_t>(v) * width + u) * 3];
      if (!surface) {
        px[0] = 170, px[1] = 200, px[2] = 235;
        continue;
      }
      const bool check =
          (static_cast<int>(std::floor(a * 2)) + static_cast<int>(std::floor(b * 2))) & 1;
      const double shade = std::exp(-0.05 * hit);
      const double r = surface == 1 ? 0.55 + 0.4 * std::sin(a * 1.3) : 0.45;
      const double g = surface == 1 ? 0.45 + 0.4 * std::cos(b * 1.7) : 0.6;
      const double bl = surface == 1 ? 0.5 : 0.35 + 0.3 * std::sin(b);
      const double k = (check ? 1.0 : 0.55) * shade * 255.0;
      px[0] = static_cast<uint8_t>(std::min(255.0, r * k));
      px[1] = static_cast<uint8_t>(std::min(255.0, g * k));
      px[2] = static_cast<uint8_t>(std::min(255.0, bl * k));
    }
  return img;
}

// The rendered video as a frame source; each frame is also saved as the PNG it was made from.
class RenderedSource final : public FrameSource {
 public:
  RenderedSource(const DemoArgs& a, std::string dir, FrameNamer name)
      : a_(a), dir_(std::move(dir)), name_(std::move(name)) {}
  std::optional<Tensor> get(int64_t i) override {
    if (i < 0 || i >= a_.frames) return std::nullopt;
    const auto t0 = std::chrono::steady_clock::now();
    ImageU8 img = render_frame(static_cast<int>(i), a_.width, a_.height);
    write_png(dir_ + "/" + name_(i), img);
    Tensor t = to_tensor(img);
    render_ns_ +=
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0)
            .count();
    return t;
  }
  int64_t count() const override { return a_.frames; }
  FrameNamer names() const override { return name_; }
  bool concurrent() const override { return true; }
  Times times() const override { return {render_ns_ * 1e-9, 0}; }

 private:
  const DemoArgs& a_;
  std::string dir_;
  FrameNamer name_;
  std::atomic<int64_t> render_ns_{0};
};

// The program as it was called (build/lingbot-map from a checkout), for the commands suggested.
std::string program() {
  return command_line().empty() ? std::string("lingbot-map") : command_line().front();
}

int demo(const DemoArgs& a) {
  LINGBOT_CHECK(a.width % 14 == 0 && a.height % 14 == 0,
                "--width and --height must be multiples of 14");
  LINGBOT_CHECK(a.frames >= 1, "--frames must be at least 1");
  // Exported frames are named like the rendered ones in frames/.
  const FrameNamer frame_name = [](int64_t i) {
    char name[32];
    std::snprintf(name, sizeof name, "%06lld.png", static_cast<long long>(i));
    return std::string(name);
  };
  RunOptions o{.out_dir = a.out};
  o.exports = export_options(a.exports, frame_name);
  const std::string frames_dir = a.out + "/frames";
  std::error_code ec;
  std::filesystem::create_directories(a.out, ec);
  claim_output_folder(a.out, /*overwrite=*/true);  // the demo's folder: a new demo replaces it
  std::filesystem::create_directories(frames_dir, ec);
  if (ec) throw Error("cannot create " + frames_dir + ": " + ec.message());
  EngineOptions eo = a.engine;
  if (eo.arch.empty()) eo.arch = lingbot::is_cuda_device(eo.device) ? "lingbot-map" : "tiny";
  auto engine = Engine::create(eo);
  RenderedSource source(a, frames_dir, frame_name);
  StreamOptions stream = a.stream;
  stream.keyframe_interval = auto_keyframe_interval(a.frames);  // as `run` does by default
  // A long demo caps the special-token stream so that its frame time stays flat (the bounded-
  // memory mode; `run` keeps every frame's specials, as the reference, unless asked).
  stream.max_special_frames = a.max_special_frames >= 0 ? a.max_special_frames
                              : a.frames > 320          ? 64
                                                        : 0;
  o.stream = stream;
  const nlohmann::json record = run_record(*engine, eo, o, "demo", a.frames);
  const RunReport s = run_with_progress(*engine, source, o, a.quiet);
  write_run_record(a.out, record, &s);
  std::printf(
      "demo: %lld frames (%dx%d) in %.1f s, %.2f frames/s on %s\n"
      "  input frames:  %s/\n  predictions:   %s/predictions.safetensors\n"
      "Synthetic weights give meaningless geometry: this shows the pipeline, not the model.\n",
      static_cast<long long>(s.frames), a.width, a.height, s.seconds, s.fps(),
      engine->info().backend.c_str(), frames_dir.c_str(), a.out.c_str());
  if (stream.keyframe_interval > 1 || stream.max_special_frames > 0)
    std::printf(
        "  long sequence: keyframe interval %d, special tokens of the last %lld evicted "
        "frames attended (--max-special-frames)\n",
        stream.keyframe_interval, static_cast<long long>(stream.max_special_frames));
  if (!o.exports.formats.empty())
    std::printf("  exports:       %s/ (%s)\n", a.out.c_str(), join(o.exports.formats).c_str());
  if (s.stopped) return 130;  // interrupted: the files of the frames before are written
  if (!a.no_render) {
    // The result drawn as `lingbot-map render DIR --camera static` would (an overview: the
    // synthetic cameras jump about too much to follow).
    const auto t0 = std::chrono::steady_clock::now();
    const Renderer renderer(read_result(a.out),
                            {.width = 640, .height = 360, .camera = CameraPath::Static});
    const RenderedVideo v = write_video(renderer, a.out + "/fly.mp4", 10);
    const double secs =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("  rendered:      %s%s (%lld frames in %.1f s; lingbot-map render --help)\n",
                v.path.c_str(), v.video ? "" : "/frame_NNNNNN.png",
                static_cast<long long>(v.frames), secs);
    if (!v.video)
      std::printf(
          "                 (PNG frames: this build has no FFmpeg; scripts/setup.sh "
          "installs it, then the demo writes fly.mp4)\n");
  }
  std::printf(
      "  run.json says how it was made; everything in %s/ is the demo's and is replaced by the "
      "next one.\n"
      "Look at it:   %s view %s   (then open http://127.0.0.1:8080/)\n"
      "Real model:   download lingbot-map-long.pt (README, \"Getting the model\"), then\n"
      "              %s run --model lingbot-map-long.pt --input FRAMES_OR_VIDEO --out result/\n",
      a.out.c_str(), program().c_str(), a.out.c_str(), program().c_str());
  return 0;
}

}  // namespace

void add_demo(CLI::App& app) {
  auto a = std::make_shared<DemoArgs>();
  CLI::App* sub = app.add_subcommand(
      "demo", "Run the whole pipeline on a rendered video with synthetic weights");
  sub->add_option("--frames", a->frames, "video length")->capture_default_str();
  sub->add_option("--width", a->width, "frame width (multiple of 14)")->capture_default_str();
  sub->add_option("--height", a->height, "frame height (multiple of 14)")->capture_default_str();
  sub->add_option("--out", a->out, "output folder")->capture_default_str();
  sub->add_option("--model", a->engine.model, "weights")->capture_default_str();
  sub->add_option("--arch", a->engine.arch,
                  "architecture (default: tiny on the CPU, lingbot-map on a GPU)");
  sub->add_option("--device", a->engine.device, "cpu, cuda or cuda:N")->capture_default_str();
  sub->add_option("--max-special-frames", a->max_special_frames,
                  "special tokens of only this many evicted frames (0 = all; default: 64 beyond "
                  "320 frames, else all)");
  sub->add_flag("--quiet", a->quiet, "no per-frame progress");
  sub->add_flag("--no-render", a->no_render,
                "no fly-through video of the result (DIR/fly.mp4, or PNG frames in DIR/fly/)");
  add_export_options(sub, a->exports);
  commands().push_back({sub, [a] { return demo(*a); }});
}

}  // namespace lingbot::cli
