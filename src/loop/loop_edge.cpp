// A verified loop as a Sim(3) edge: the pair's relative pose from a two-frame block of the model,
// carried into the stream's units by the depths at the inliers, and checked against the images'
// own two-view geometry (lingbot/loop_edge.h).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <numbers>
#include <vector>

#include "lingbot/error.h"
#include "lingbot/loop.h"
#include "loop/features.h"
#include "loop/mat3.h"

namespace lingbot {

namespace {

using M3 = mat3::M3;
using mat3::mul;
using mat3::transpose;
using V3 = std::array<double, 3>;

M3 rotation_of(const std::array<float, 12>& c2w) {
  return Sim3::from_c2w(c2w.data()).rotation();
}
V3 translation_of(const std::array<float, 12>& c2w) {
  return {c2w[3], c2w[7], c2w[11]};
}
V3 mat_vec(const M3& a, const V3& v) {
  V3 r{};
  for (int i = 0; i < 3; ++i) r[i] = a[i * 3] * v[0] + a[i * 3 + 1] * v[1] + a[i * 3 + 2] * v[2];
  return r;
}
// The angle of a rotation matrix, from its trace (clamped: rounding may leave |cos| above 1).
double angle_deg(const M3& r) {
  const double c = std::clamp((r[0] + r[4] + r[8] - 1) / 2, -1.0, 1.0);
  return std::acos(c) * 180 / std::numbers::pi;
}
M3 inverse3(const std::array<float, 9>& k) {
  const double a = k[0], b = k[1], c = k[2], d = k[3], e = k[4], f = k[5], g = k[6], h = k[7],
               i = k[8];
  const double det = a * (e * i - f * h) - b * (d * i - f * g) + c * (d * h - e * g);
  return {(e * i - f * h) / det, (c * h - b * i) / det, (b * f - c * e) / det,
          (f * g - d * i) / det, (a * i - c * g) / det, (c * d - a * f) / det,
          (d * h - e * g) / det, (b * g - a * h) / det, (a * e - b * d) / det};
}

// The median of stream / pair depth over the pairs where both are finite and positive.
double median_ratio(const std::vector<float>& stream, const std::vector<float>& pair, int& count) {
  std::vector<double> r;
  const size_t n = std::min(stream.size(), pair.size());
  for (size_t k = 0; k < n; ++k)
    if (std::isfinite(stream[k]) && std::isfinite(pair[k]) && stream[k] > 0 && pair[k] > 0)
      r.push_back(static_cast<double>(stream[k]) / pair[k]);
  count = static_cast<int>(r.size());
  if (r.empty()) return 0;
  const size_t mid = r.size() / 2;
  std::nth_element(r.begin(), r.begin() + mid, r.end());
  if (r.size() % 2) return r[mid];
  const double upper = r[mid];
  return (*std::max_element(r.begin(), r.begin() + mid) + upper) / 2;
}

// Depth map value at pixel (x, y), nearest pixel; NaN outside.
float sample(const FrameResult& r, float x, float y) {
  const long u = std::lround(x), v = std::lround(y);
  if (u < 0 || v < 0 || u >= r.width || v >= r.height ||
      r.depth.size() != static_cast<size_t>(r.height) * r.width)
    return NAN;
  return r.depth[static_cast<size_t>(v) * r.width + u];
}

}  // namespace

LoopEdge loop_edge_from_pair(const LoopClosure& loop, const PairGeometry& pair,
                             const LoopEdgeOptions& o) {
  LoopEdge e;
  e.query = loop.query;
  e.match = loop.match;
  e.edge.from = loop.match;
  e.edge.to = loop.query;
  e.edge.score = loop.verification.inliers;

  // The pair's relative pose: query camera -> match camera, in the pair's units.
  const M3 rq = rotation_of(pair.query_c2w), rm = rotation_of(pair.match_c2w);
  const V3 tq = translation_of(pair.query_c2w), tm = translation_of(pair.match_c2w);
  const M3 r_mq = mul(transpose(rm), rq);
  const V3 t_mq = mat_vec(transpose(rm), {tq[0] - tm[0], tq[1] - tm[1], tq[2] - tm[2]});

  // Units: a length L' of the pair is s_q L' in the query's stream and s_m L' in the match's.
  e.scale_query = median_ratio(loop.query_depths, pair.query_depths, e.depth_pairs_query);
  e.scale_match = median_ratio(loop.match_depths, pair.match_depths, e.depth_pairs_match);
  // x_m (match units) = s_m (R x' + t') with x' = x_q / s_q: scale s_m / s_q, translation s_m t'.
  if (e.scale_query > 0 && e.scale_match > 0) {
    const V3 t = {e.scale_match * t_mq[0], e.scale_match * t_mq[1], e.scale_match * t_mq[2]};
    e.edge.relative = Sim3::from_rt(r_mq.data(), t.data(), e.scale_match / e.scale_query);
  }

  // The images' own geometry: the rotation of the essential matrix against the model's, and the
  // inliers against the model's epipolar lines (query = a, match = b: x_m ~ R x_q + t).
  const auto& inliers = loop.verification.inlier_points;
  M3 r_e;
  V3 t_e;
  const bool geometry = loop::essential_pose(loop.verification.fundamental, pair.query_intrinsics,
                                             pair.match_intrinsics, inliers, r_e, t_e);
  if (geometry) e.rotation_error_deg = angle_deg(mul(transpose(r_mq), r_e));
  // F_model = K_m^-T [t]x R K_q^-1; the distance of each inlier to its line in either image.
  const double tn = std::sqrt(t_mq[0] * t_mq[0] + t_mq[1] * t_mq[1] + t_mq[2] * t_mq[2]);
  if (tn > 0 && !inliers.empty()) {
    const M3 tx = {0, -t_mq[2], t_mq[1], t_mq[2], 0, -t_mq[0], -t_mq[1], t_mq[0], 0};
    const M3 f = mul(mul(transpose(inverse3(pair.match_intrinsics)), mul(tx, r_mq)),
                     inverse3(pair.query_intrinsics));
    double sum = 0;
    for (const auto& p : inliers) {
      const V3 xq = {p[0], p[1], 1}, xm = {p[2], p[3], 1};
      const V3 lm = mat_vec(f, xq), lq = mat_vec(transpose(f), xm);
      const double d = xm[0] * lm[0] + xm[1] * lm[1] + lm[2];
      const double nm = std::hypot(lm[0], lm[1]), nq = std::hypot(lq[0], lq[1]);
      sum += (nm > 0 ? std::abs(d) / nm : 0) / 2 + (nq > 0 ? std::abs(d) / nq : 0) / 2;
    }
    e.epipolar_error_px = sum / static_cast<double>(inliers.size());
  }

  if (e.depth_pairs_query < o.min_depth_pairs || e.depth_pairs_match < o.min_depth_pairs)
    e.reason = "depth";
  else if (!(tn > 0))  // no baseline: no epipolar geometry to hold the model to
    e.reason = "baseline";
  else if (!geometry)
    e.reason = "geometry";
  else if (!(e.rotation_error_deg <= o.max_rotation_deg))
    e.reason = "rotation";
  else if (!(e.epipolar_error_px <= o.max_epipolar_px))
    e.reason = "epipolar";
  e.accepted = e.reason.empty();
  return e;
}

LoopEdge measure_loop_edge(Engine& engine, const StreamOptions& stream, const Tensor& query_frame,
                           const Tensor& match_frame, const LoopClosure& loop,
                           const LoopEdgeOptions& o) {
  const auto t0 = std::chrono::steady_clock::now();
  // The bidirectional block that starts every sequence, over the two frames alone: a session of
  // its own (its caches are the pair's), the live one untouched.
  StreamOptions pair_options;
  pair_options.scale_frames = 2;
  pair_options.window = 1;
  pair_options.keyframe_interval = 1;
  pair_options.camera_iterations = stream.camera_iterations;
  pair_options.cross_frame_special = stream.cross_frame_special;
  pair_options.camera_only = stream.camera_only;
  std::vector<FrameResult> results;
  {
    auto session = engine.start(pair_options);
    auto keep = [&](const FrameResult& r) { results.push_back(r); };
    session->push(query_frame, keep);
    session->push(match_frame, keep);
    session->finish(keep);
  }
  LINGBOT_CHECK(results.size() == 2, "loop edge: the two-frame block gave " +
                                         std::to_string(results.size()) + " results");
  std::sort(results.begin(), results.end(),
            [](const FrameResult& a, const FrameResult& b) { return a.index < b.index; });
  PairGeometry pair;
  pair.query_c2w = results[0].c2w;
  pair.match_c2w = results[1].c2w;
  pair.query_intrinsics = results[0].intrinsics;
  pair.match_intrinsics = results[1].intrinsics;
  for (const auto& p : loop.verification.inlier_points) {
    pair.query_depths.push_back(sample(results[0], p[0], p[1]));
    pair.match_depths.push_back(sample(results[1], p[2], p[3]));
  }
  LoopEdge e = loop_edge_from_pair(loop, pair, o);
  e.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return e;
}

}  // namespace lingbot
