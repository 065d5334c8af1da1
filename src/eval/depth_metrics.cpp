// Depth-map metrics after scale alignment (definitions in lingbot/eval.h).
#include <algorithm>
#include <cmath>

#include "eval/statistics.h"
#include "lingbot/error.h"
#include "lingbot/eval.h"

namespace lingbot::eval {
namespace {

struct Sums {
  double abs_rel = 0, sq_rel = 0, sq = 0, sq_log = 0, d1 = 0, d2 = 0, d3 = 0;
  size_t n = 0;
};

// The valid pixels of frames [first, last): indices into the maps.
std::vector<size_t> valid_pixels(const DepthMaps& p, const DepthMaps& g, const DepthOptions& o,
                                 int64_t first, int64_t last) {
  std::vector<size_t> v;
  const size_t plane = static_cast<size_t>(g.height * g.width);
  for (size_t i = static_cast<size_t>(first) * plane; i < static_cast<size_t>(last) * plane; ++i) {
    const double gv = g.values[i], pv = p.values[i];
    if (!std::isfinite(gv) || !(gv > 0) || !std::isfinite(pv) || !(pv > 0)) continue;
    if (o.min_depth > 0 && gv < o.min_depth) continue;
    if (o.max_depth > 0 && gv > o.max_depth) continue;
    v.push_back(i);
  }
  return v;
}

double fit_scale(const DepthMaps& p, const DepthMaps& g, const std::vector<size_t>& px,
                 DepthScaling how) {
  if (how == DepthScaling::None) return 1;
  if (how == DepthScaling::LeastSquares) {
    double pg = 0, pp = 0;  // argmin_s sum (s p - g)^2
    for (size_t i : px) {
      pg += double(p.values[i]) * g.values[i];
      pp += double(p.values[i]) * p.values[i];
    }
    return pg / pp;
  }
  std::vector<double> pv, gv;
  pv.reserve(px.size());
  gv.reserve(px.size());
  for (size_t i : px) {
    pv.push_back(p.values[i]);
    gv.push_back(g.values[i]);
  }
  return median_of(gv) / median_of(pv);
}

Sums accumulate(const DepthMaps& p, const DepthMaps& g, const std::vector<size_t>& px, double s) {
  Sums a;
  for (size_t i : px) {
    const double pv = s * p.values[i], gv = g.values[i];
    const double d = pv - gv, ratio = std::max(pv / gv, gv / pv), lg = std::log(pv) - std::log(gv);
    a.abs_rel += std::fabs(d) / gv;
    a.sq_rel += d * d / gv;
    a.sq += d * d;
    a.sq_log += lg * lg;
    a.d1 += ratio < 1.25;
    a.d2 += ratio < 1.25 * 1.25;
    a.d3 += ratio < 1.25 * 1.25 * 1.25;
    ++a.n;
  }
  return a;
}

}  // namespace

DepthReport evaluate_depth(const DepthMaps& p, const DepthMaps& g, const DepthOptions& o) {
  if (p.frames != g.frames)
    throw Error("mismatched lengths: " + p.name + " has " + std::to_string(p.frames) +
                    " depth maps, " + g.name + " " + std::to_string(g.frames),
                ErrorKind::InvalidArgument);
  if (p.height != g.height || p.width != g.width)
    throw Error("the depth maps differ in size: " + p.name + " " + std::to_string(p.width) + "x" +
                    std::to_string(p.height) + ", " + g.name + " " + std::to_string(g.width) + "x" +
                    std::to_string(g.height) +
                    " (bring the reference to the model input's size and crop first)",
                ErrorKind::InvalidArgument);
  LINGBOT_CHECK_ARG(p.values.size() == static_cast<size_t>(p.frames * p.height * p.width) &&
                        g.values.size() == p.values.size(),
                    "depth maps: the values do not fill frames x height x width");
  LINGBOT_CHECK_ARG(
      o.min_depth >= 0 && o.max_depth >= 0 && (o.max_depth == 0 || o.max_depth > o.min_depth),
      "depth bounds: need 0 <= min < max (0 = none)");
  DepthReport r;
  r.frames = g.frames;
  r.scaling = o.scaling;
  r.per_frame = o.per_frame;
  const auto finish = [](const Sums& a, DepthReport& out, double weight) {
    const double n = static_cast<double>(a.n);
    out.abs_rel += weight * a.abs_rel / n;
    out.sq_rel += weight * a.sq_rel / n;
    out.rmse += weight * std::sqrt(a.sq / n);
    out.log_rmse += weight * std::sqrt(a.sq_log / n);
    out.delta1 += weight * a.d1 / n;
    out.delta2 += weight * a.d2 / n;
    out.delta3 += weight * a.d3 / n;
  };
  if (!o.per_frame) {
    const auto px = valid_pixels(p, g, o, 0, g.frames);
    if (px.empty())
      throw Error("no valid depth pixel: no pixel has a reference and a predicted depth > 0" +
                      std::string(o.min_depth > 0 || o.max_depth > 0 ? " within the bounds" : ""),
                  ErrorKind::InvalidArgument);
    r.scale = fit_scale(p, g, px, o.scaling);
    finish(accumulate(p, g, px, r.scale), r, 1.0);
    r.pixels = px.size();
    return r;
  }
  // Per frame: frames without a valid pixel are left out of the mean (and counted out).
  std::vector<std::vector<size_t>> frames;
  for (int64_t f = 0; f < g.frames; ++f) {
    auto px = valid_pixels(p, g, o, f, f + 1);
    if (!px.empty()) frames.push_back(std::move(px));
  }
  if (frames.empty()) throw Error("no valid depth pixel in any frame", ErrorKind::InvalidArgument);
  const double w = 1.0 / static_cast<double>(frames.size());
  r.scale = 0;
  for (const auto& px : frames) {
    const double s = fit_scale(p, g, px, o.scaling);
    finish(accumulate(p, g, px, s), r, w);
    r.scale += w * s;
    r.pixels += px.size();
  }
  r.frames = static_cast<int64_t>(frames.size());
  return r;
}

}  // namespace lingbot::eval
