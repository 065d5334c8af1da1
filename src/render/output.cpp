// write_video: the renderer's frames into a video file or a folder of PNGs, and the parsing of
// the options that choose them.
#include <omp.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdio>
#include <filesystem>
#include <vector>

#include "io/sinks/sink_util.h"
#include "lingbot/error.h"
#include "lingbot/render.h"
#include "render/encoder.h"
#include "render/parallel.h"

namespace lingbot {

namespace fs = std::filesystem;

CameraPath parse_camera_path(const std::string& name) {
  if (name == "follow") return CameraPath::Follow;
  if (name == "birdeye") return CameraPath::Birdeye;
  if (name == "static") return CameraPath::Static;
  throw Error("unknown camera path '" + name + "' (follow, birdeye or static)",
              ErrorKind::InvalidArgument);
}

std::pair<int, int> parse_render_size(const std::string& text) {
  int w = 0, h = 0;
  const size_t x = text.find_first_of("xX");
  bool ok = x != std::string::npos;
  if (ok) {
    const char* b = text.data();
    auto a = std::from_chars(b, b + x, w);
    auto c = std::from_chars(b + x + 1, b + text.size(), h);
    ok = a.ec == std::errc() && a.ptr == b + x && c.ec == std::errc() && c.ptr == b + text.size() &&
         x > 0 && std::isdigit(static_cast<unsigned char>(text[0]));
  }
  ok = ok && w >= 16 && h >= 16 && w <= 4096 && h <= 4096 && w % 2 == 0 && h % 2 == 0;
  if (!ok)
    throw Error(
        "bad size '" + text + "': expected WxH with even sides from 16 to 4096, e.g. 1280x720",
        ErrorKind::InvalidArgument);
  return {w, h};
}

bool video_encoding_supported() {
#if LINGBOT_HAVE_FFMPEG
  return true;
#else
  return false;
#endif
}

namespace {

// frame_000042.png -> 42; -1 for any other name.
int64_t frame_number(const std::string& name) {
  int64_t n = -1;
  if (name.size() != 16 || name.rfind("frame_", 0) != 0 || name.substr(12) != ".png") return -1;
  auto r = std::from_chars(name.data() + 6, name.data() + 12, n);
  return r.ec == std::errc() && r.ptr == name.data() + 12 ? n : -1;
}

// Every frame in order, handed to `take`.
void for_each_frame(const Renderer& renderer, const std::function<void(int64_t, ImageU8&)>& take) {
  const int64_t n = renderer.frames(), batch = std::max(1, omp_get_max_threads());
  for (int64_t t0 = 0; t0 < n; t0 += batch) {
    // A batch at once, one frame per thread: the per-frame work that does not spread over
    // points (clearing, resolving, lines) then runs in parallel too.
    std::vector<ImageU8> frames(static_cast<size_t>(std::min(batch, n - t0)));
    render::parallel_for(static_cast<int64_t>(frames.size()), [&](int64_t k) {
      frames[static_cast<size_t>(k)] = renderer.render(t0 + k);
    });
    for (size_t k = 0; k < frames.size(); ++k) take(t0 + static_cast<int64_t>(k), frames[k]);
  }
}

RenderedVideo write_pngs(const Renderer& renderer, const std::string& dir,
                         const std::function<void(int64_t, int64_t)>& progress) {
  sinks::make_folder(dir);
  std::error_code ec;
  const int64_t n = renderer.frames();
  for_each_frame(renderer, [&](int64_t t, ImageU8& img) {
    write_png((fs::path(dir) / default_frame_name(t)).string(), img);
    if (progress) progress(t + 1, n);
  });
  // Frames of an earlier, longer rendering into the same folder would play on after this one.
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (frame_number(e.path().filename().string()) >= n) fs::remove(e.path(), ec);
  return {dir, false, "", n};
}

}  // namespace

RenderedVideo write_video(const Renderer& renderer, const std::string& out, int fps,
                          const std::function<void(int64_t, int64_t)>& progress) {
  LINGBOT_CHECK_ARG(!out.empty(), "no output named");
  LINGBOT_CHECK_ARG(fps >= 1 && fps <= 240, "the frame rate must be 1 to 240 frames/s");
  std::error_code ec;
  // x.gif would otherwise become a folder named x.gif: a name with another extension is taken
  // for a file in a format that is not written, unless that folder exists already.
  if (!render::is_video_name(out) && fs::path(out).has_extension() && !fs::is_directory(out, ec))
    throw Error("cannot write " + out + ": " + fs::path(out).extension().string() +
                    " is not a format render writes (a video: .mp4, .mkv, .mov, .avi or .webm; "
                    "PNG frames: a folder name without extension)",
                ErrorKind::InvalidArgument);
  if (!render::is_video_name(out)) return write_pngs(renderer, out, progress);
  if (!video_encoding_supported())  // fly.mp4 -> fly/frame_000000.png, ...
    return write_pngs(renderer, (fs::path(out).parent_path() / fs::path(out).stem()).string(),
                      progress);
  if (fs::is_directory(out, ec))
    throw Error("cannot write " + out + ": it is a folder", ErrorKind::InvalidArgument);
  if (fs::path(out).has_parent_path()) sinks::make_folder(fs::path(out).parent_path().string());
  // Written beside the target and renamed over it at the end: a failure leaves what was there.
  const std::string part = out + ".part";
  try {
    const RenderOptions& o = renderer.options();
    render::VideoEncoder encoder(part, out, o.width, o.height, fps);
    const int64_t n = renderer.frames();
    for_each_frame(renderer, [&](int64_t t, ImageU8& img) {
      encoder.add(img);
      if (progress) progress(t + 1, n);
    });
    encoder.finish();
    fs::rename(part, out, ec);
    if (ec) throw Error("cannot write " + out + ": " + ec.message());
    return {out, true, encoder.codec(), n};
  } catch (...) {
    fs::remove(part, ec);
    throw;
  }
}

}  // namespace lingbot
