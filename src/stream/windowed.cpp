#include "stream/windowed.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <string>

#include "lingbot/error.h"
#include "model/pose.h"
#include "stream/result_camera.h"

namespace lingbot {
namespace {

using Mat3 = std::array<std::array<double, 3>, 3>;

Mat3 rotation_of(const std::array<float, 9>& pose_enc) {
  // The size only feeds the intrinsics, which are not used here.
  const CameraPose p = decode_pose(pose_enc.data(), 2, 2);
  Mat3 R;
  for (int a = 0; a < 3; ++a)
    for (int b = 0; b < 3; ++b) R[a][b] = p.c2w[a][b];
  return R;
}

std::array<double, 3> rotate(const Mat3& R, const float* v) {
  std::array<double, 3> out{};
  for (int a = 0; a < 3; ++a)
    for (int b = 0; b < 3; ++b) out[a] += R[a][b] * v[b];
  return out;
}

void check_options(const WindowedOptions& o) {
  LINGBOT_CHECK_ARG(o.stream.scale_frames >= 1, "windowed mode needs at least 1 scale frame, got " +
                                                    std::to_string(o.stream.scale_frames));
  LINGBOT_CHECK_ARG(o.window_size >= 1,
                    "the window size (KV slots per window) must be at least 1, got " +
                        std::to_string(o.window_size));
}

// Streams [begin, ...) through `session`: to `end` under a fixed plan, or, with `keyframes` >= 0
// (flow mode), until the window holds that many keyframes after its scale block or the sequence
// ends. The frames it covers are [begin, begin + frames()). A frame that cannot be read ends the
// window there, as the end of the sequence would, with its message in `source_error`.
WindowPrediction run_window(Session& session, int64_t begin, int64_t end,
                            const std::function<Tensor(int64_t)>& frame_at, int scale_frames,
                            std::string& source_error, int64_t keyframes = -1) {
  WindowPrediction w;
  const int64_t scale = std::min<int64_t>(scale_frames, end - begin);
  int64_t kept = 0;
  auto collect = [&](const FrameResult& r) {
    if (w.pose_enc.empty()) {
      w.height = r.height;
      w.width = r.width;
    }
    w.pose_enc.push_back(r.pose_enc);
    w.depth.insert(w.depth.end(), r.depth.begin(), r.depth.end());
    w.conf.insert(w.conf.end(), r.confidence.begin(), r.confidence.end());
    w.frame_type.push_back(r.index < scale ? 0 : r.keyframe ? 1 : 2);
    if (r.index >= scale && r.keyframe) ++kept;
  };
  auto push = [&](int64_t i) {
    Tensor frame;
    try {
      frame = frame_at(i);
    } catch (const Error& e) {
      source_error = e.what();
      return false;
    }
    session.push(frame, collect);
    return true;
  };
  int64_t i = begin;
  while (i < begin + scale && push(i)) ++i;
  session.finish(collect);  // a window shorter than the scale block runs it here
  while (source_error.empty() && i < end && (keyframes < 0 || kept < keyframes) && push(i)) ++i;
  session.finish(collect);  // the last frame's results may still be on their way
  LINGBOT_CHECK(w.frames() == i - begin, "window [" + std::to_string(begin) + ", " +
                                             std::to_string(i) + ") returned " +
                                             std::to_string(w.frames()) + " frames");
  return w;
}

}  // namespace

int64_t resolve_overlap(int64_t frames, const WindowedOptions& options) {
  check_options(options);
  const int64_t ws = std::min<int64_t>(options.stream.scale_frames, frames);
  int64_t o = ws;
  if (options.overlap_keyframes >= 0) {
    o = std::max<int64_t>(
        ws, int64_t{options.overlap_keyframes} * std::max(options.stream.keyframe_interval, 1));
  } else if (options.overlap >= 0) {
    o = options.overlap;
  }
  return frames > 1 ? std::min(o, frames - 1) : 0;
}

StreamOptions per_window_stream(const WindowedOptions& o) {
  StreamOptions s = o.stream;
  const int64_t slots = std::max<int64_t>(int64_t{o.window_size} - s.scale_frames, 1);
  s.window = static_cast<int>(std::min<int64_t>(s.window, slots));
  s.keyframe_interval = std::max(1, s.keyframe_interval);
  return s;
}

std::vector<std::pair<int64_t, int64_t>> plan_windows(int64_t frames,
                                                      const WindowedOptions& options) {
  check_options(options);
  if (frames <= 0) return {};
  const int64_t ws = std::min<int64_t>(options.stream.scale_frames, frames);
  const int64_t k = std::max(options.stream.keyframe_interval, 1);
  const int64_t keyframes = std::max<int64_t>(options.window_size - ws, 0);
  const int64_t effective = std::min(ws + keyframes * k, frames);
  if (effective >= frames) return {{0, frames}};
  const int64_t step = std::max<int64_t>(effective - resolve_overlap(frames, options), 1);
  std::vector<std::pair<int64_t, int64_t>> windows;
  for (int64_t s = 0;; s += step) {
    windows.emplace_back(s, std::min(s + effective, frames));
    if (windows.back().second == frames) break;
  }
  return windows;
}

Sim3Rt estimate_alignment(const WindowPrediction& previous, const WindowPrediction& current,
                          int64_t overlap) {
  const int64_t tp = previous.frames(), tc = current.frames();
  if (overlap <= 0 || tp == 0 || tc == 0) return {};
  const int64_t start = std::max<int64_t>(tp - overlap, 0);
  const int64_t n = std::min({overlap, tp - start, tc});
  std::vector<int64_t> paired;
  for (int64_t o = 0; o < n; ++o)
    if (previous.is_keyframe(start + o) && current.is_keyframe(o)) paired.push_back(o);
  // Without a common keyframe the reference falls back to the first overlap frame.
  if (paired.empty()) paired.push_back(0);
  const int64_t anchor = paired.back();

  Sim3Rt tf;
  const Mat3 rp = rotation_of(previous.pose_enc[start + anchor]);
  const Mat3 rc = rotation_of(current.pose_enc[anchor]);
  for (int a = 0; a < 3; ++a)
    for (int b = 0; b < 3; ++b) {
      double v = 0;
      for (int c = 0; c < 3; ++c) v += rp[a][c] * rc[b][c];
      tf.R[a][b] = v;
    }

  const int64_t plane = current.height * current.width;
  LINGBOT_CHECK(previous.height == current.height && previous.width == current.width,
                "windows to align must have one image size");
  std::vector<float> ratios;
  ratios.reserve(paired.size() * plane);
  for (const int64_t o : paired) {
    const float* dp = previous.depth.data() + (start + o) * plane;
    const float* dc = current.depth.data() + o * plane;
    for (int64_t i = 0; i < plane; ++i) {
      if (!std::isfinite(dp[i]) || !std::isfinite(dc[i]) || !(std::fabs(dc[i]) > FLT_EPSILON))
        continue;
      // float32 division as the reference does, so that the median picks the same value.
      ratios.push_back(dp[i] / dc[i]);
    }
  }
  if (!ratios.empty()) {
    // torch.median: the lower of the two middle values for an even count.
    const auto mid = ratios.begin() + (ratios.size() - 1) / 2;
    std::nth_element(ratios.begin(), mid, ratios.end());
    tf.s = std::clamp(*mid, 1e-3f, 1e3f);
  }

  const auto cc = rotate(tf.R, current.pose_enc[anchor].data());
  for (int a = 0; a < 3; ++a) tf.t[a] = previous.pose_enc[start + anchor][a] - tf.s * cc[a];
  return tf;
}

void warp_window(WindowPrediction& window, const Sim3Rt& tf) {
  for (auto& pe : window.pose_enc) {
    const Mat3 local = rotation_of(pe);
    const auto centre = rotate(tf.R, pe.data());
    CameraPose p{};
    for (int a = 0; a < 3; ++a) {
      for (int b = 0; b < 3; ++b) {
        double v = 0;
        for (int c = 0; c < 3; ++c) v += tf.R[a][c] * local[c][b];
        p.c2w[a][b] = static_cast<float>(v);
      }
      p.c2w[a][3] = static_cast<float>(tf.s * centre[a] + tf.t[a]);
    }
    p.K[0][0] = p.K[1][1] = p.K[2][2] = 1;  // placeholder: the field of view is kept as it was
    float out[9];
    encode_pose(p, 2, 2, out);
    std::copy(out, out + 7, pe.begin());
  }
  const float s = static_cast<float>(tf.s);
  for (float& d : window.depth) d *= s;
}

WindowedRun run_windowed(Engine& engine, int64_t frames,
                         const std::function<Tensor(int64_t)>& frame_at,
                         const WindowedOptions& options, const Session::Callback& on_result,
                         const std::function<void(const WindowAlignment&)>& on_window,
                         const std::function<void(const char*)>& log) {
  check_options(options);
  WindowedRun out;
  if (frames <= 0) return out;
  const bool flow = options.stream.flow_threshold > 0;
  // The fixed schedule is known up front; flow windows are appended as they close.
  const std::vector<std::pair<int64_t, int64_t>> plan =
      flow ? std::vector<std::pair<int64_t, int64_t>>{} : plan_windows(frames, options);
  const int64_t overlap = resolve_overlap(frames, options);
  // The reference would stitch nothing from such windows and return fewer frames than it was
  // given; refusing is more useful than a silently shortened result.
  const int64_t first_len = flow ? frames : plan[0].second - plan[0].first;
  LINGBOT_CHECK_ARG(
      plan.size() <= 1 || overlap < first_len,
      "the overlap (" + std::to_string(overlap) + " frames) must be shorter than a window (" +
          std::to_string(first_len) +
          " frames = scale frames + (window size - scale frames) x keyframe interval); "
          "lower the overlap or raise the window size");

  auto session = engine.start(per_window_stream(options));
  WindowPrediction previous;
  int64_t height = 0, width = 0, begin = 0, previous_end = 0;
  // The frames stitched: all of them, or those before a frame the source failed on. A failure
  // makes its window the last, cut there; up to it the windows, and so the alignment, are the
  // ones a run given only those frames would have had.
  int64_t total = frames;
  for (int64_t j = 0; begin < total; ++j) {
    if (j > 0) session->reset();
    const int scale_frames = options.stream.scale_frames;
    const int64_t scale = std::min<int64_t>(scale_frames, frames - begin);
    WindowPrediction current =
        flow
            ? run_window(*session, begin, frames, frame_at, scale_frames, out.source_error,
                         std::max<int64_t>(options.window_size - scale, 0))
            : run_window(*session, begin, plan[j].second, frame_at, scale_frames, out.source_error);
    const int64_t end = begin + current.frames();
    if (!out.source_error.empty()) {
      total = end;
      if (current.frames() == 0) break;  // it failed on the window's first frame
    }
    const int64_t next = end == total ? total
                         : flow       ? std::max(end - overlap, begin + scale)
                                      : plan[j + 1].first;
    if (j == 0) {
      height = current.height;
      width = current.width;
    }
    LINGBOT_CHECK(current.height == height && current.width == width,
                  "all frames must have one size: window " + std::to_string(j) + " is " +
                      std::to_string(current.width) + "x" + std::to_string(current.height) +
                      ", window 0 " + std::to_string(width) + "x" + std::to_string(height));

    Sim3Rt tf;
    if (j > 0) tf = estimate_alignment(previous, current, previous_end - begin);
    // A lone window is returned as predicted; with several, window 0 too goes through the warp
    // (identity), which re-canonicalises its quaternions as the reference does.
    if (j > 0 || end < total) warp_window(current, tf);

    WindowAlignment a{.index = j, .begin = begin, .end = end, .scale = static_cast<float>(tf.s)};
    for (int r = 0; r < 3; ++r) {
      for (int c = 0; c < 3; ++c) a.transform[r * 4 + c] = static_cast<float>(tf.R[r][c]);
      a.transform[r * 4 + 3] = static_cast<float>(tf.t[r]);
    }
    a.transform[15] = 1;
    out.windows.push_back(a);
    if (log) {
      char line[160];
      const std::string of = flow ? "" : "/" + std::to_string(plan.size());
      std::snprintf(line, sizeof line, "window %lld%s: frames [%lld, %lld), scale %.6g",
                    static_cast<long long>(j + 1), of.c_str(), static_cast<long long>(begin),
                    static_cast<long long>(end), tf.s);
      log(line);
    }
    if (on_window) on_window(a);

    // Frames this window shares with the next come from the next one.
    const int64_t keep = end == total ? current.frames() : next - begin;
    LINGBOT_CHECK(out.frames == begin && keep <= current.frames(),
                  "windowed stitching lost track of the sequence");
    const int64_t plane = height * width;
    for (int64_t i = 0; i < keep; ++i, ++out.frames) {
      FrameResult f;
      f.index = out.frames;
      f.scale_frame = current.frame_type[i] == 0;
      f.keyframe = current.is_keyframe(i);
      f.pose_enc = current.pose_enc[i];
      set_camera_from_pose_enc(f, static_cast<int>(height), static_cast<int>(width));
      f.depth.assign(current.depth.begin() + i * plane, current.depth.begin() + (i + 1) * plane);
      f.confidence.assign(current.conf.begin() + i * plane, current.conf.begin() + (i + 1) * plane);
      on_result(f);
    }
    previous = std::move(current);
    previous_end = end;
    begin = next;
  }
  if (out.frames == 0 && !out.source_error.empty()) throw Error(out.source_error);
  LINGBOT_CHECK(out.frames == total, "windowed stitching produced " + std::to_string(out.frames) +
                                         " frames for " + std::to_string(total));
  return out;
}

namespace {

// A tensor owning `v`.
template <class T>
Tensor stacked(std::vector<T> v, Shape shape, DType dtype) {
  auto owner = std::make_shared<std::vector<T>>(std::move(v));
  return Tensor::wrap(owner->data(), std::move(shape), dtype, owner);
}

}  // namespace

WindowedResult run_windowed(Engine& engine, int64_t frames,
                            const std::function<Tensor(int64_t)>& frame_at,
                            const WindowedOptions& options,
                            const std::function<void(const char*)>& log) {
  // The stitched frames stacked as they arrive, the maps reserved for the whole sequence: one
  // copy of them, never the old and the doubled buffer of a growing one.
  std::vector<float> pose, c2w, w2c, k, depth, conf, scales, transforms;
  std::vector<uint8_t> type, key;
  int64_t h = 0, w = 0;
  const WindowedRun run = run_windowed(
      engine, frames, frame_at, options,
      [&](const FrameResult& f) {
        h = f.height;
        w = f.width;
        if (depth.empty()) {
          depth.reserve(static_cast<size_t>(frames) * f.depth.size());
          conf.reserve(depth.capacity());
        }
        pose.insert(pose.end(), f.pose_enc.begin(), f.pose_enc.end());
        c2w.insert(c2w.end(), f.c2w.begin(), f.c2w.end());
        w2c.insert(w2c.end(), f.w2c.begin(), f.w2c.end());
        k.insert(k.end(), f.intrinsics.begin(), f.intrinsics.end());
        depth.insert(depth.end(), f.depth.begin(), f.depth.end());
        conf.insert(conf.end(), f.confidence.begin(), f.confidence.end());
        type.push_back(f.scale_frame ? 0 : f.keyframe ? 1 : 2);
        key.push_back(f.keyframe ? 1 : 0);
      },
      [&](const WindowAlignment& a) {
        scales.push_back(a.scale);
        transforms.insert(transforms.end(), a.transform.begin(), a.transform.end());
      },
      log);
  const int64_t n = run.frames, nw = static_cast<int64_t>(scales.size());
  WindowedResult r;
  r.pose_enc = stacked(std::move(pose), {n, 9}, DType::F32);
  r.depth = stacked(std::move(depth), {n, h, w}, DType::F32);
  r.depth_conf = stacked(std::move(conf), {n, h, w}, DType::F32);
  r.frame_type = stacked(std::move(type), {n}, DType::U8);
  r.is_keyframe = stacked(std::move(key), {n}, DType::Bool);
  r.chunk_scales = stacked(std::move(scales), {nw}, DType::F32);
  r.chunk_transforms = stacked(std::move(transforms), {nw, 4, 4}, DType::F32);
  r.c2w = stacked(std::move(c2w), {n, 3, 4}, DType::F32);
  r.w2c = stacked(std::move(w2c), {n, 3, 4}, DType::F32);
  r.intrinsics = stacked(std::move(k), {n, 3, 3}, DType::F32);
  for (const WindowAlignment& w : run.windows) r.windows.emplace_back(w.begin, w.end);
  r.source_error = run.source_error;
  return r;
}

}  // namespace lingbot
