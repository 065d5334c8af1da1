// ATE and RPE of an estimated trajectory against a reference (definitions in lingbot/eval.h).
#include <algorithm>
#include <cmath>
#include <sstream>

#include "lingbot/error.h"
#include "lingbot/eval.h"

namespace lingbot::eval {
namespace {

using Mat3 = std::array<double, 9>;
using Vec3 = std::array<double, 3>;

// A pose as rotation and centre.
struct Rigid {
  Mat3 r;
  Vec3 t;
};

Mat3 mul(const Mat3& a, const Mat3& b) {
  Mat3 c{};
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j)
      for (int k = 0; k < 3; ++k) c[3 * i + j] += a[3 * i + k] * b[3 * k + j];
  return c;
}
Mat3 transpose(const Mat3& a) {
  return {a[0], a[3], a[6], a[1], a[4], a[7], a[2], a[5], a[8]};
}
Vec3 mul(const Mat3& a, const Vec3& v) {
  return {a[0] * v[0] + a[1] * v[1] + a[2] * v[2], a[3] * v[0] + a[4] * v[1] + a[5] * v[2],
          a[6] * v[0] + a[7] * v[1] + a[8] * v[2]};
}
Vec3 sub(const Vec3& a, const Vec3& b) {
  return {a[0] - b[0], a[1] - b[1], a[2] - b[2]};
}
double norm(const Vec3& v) {
  return std::sqrt(v[0] * v[0] + v[1] * v[1] + v[2] * v[2]);
}

Rigid rigid(const std::array<double, 12>& p) {
  return {{p[0], p[1], p[2], p[4], p[5], p[6], p[8], p[9], p[10]}, {p[3], p[7], p[11]}};
}
// a^-1 b
Rigid between(const Rigid& a, const Rigid& b) {
  const Mat3 rt = transpose(a.r);
  return {mul(rt, b.r), mul(rt, sub(b.t, a.t))};
}

// The rotation angle of R, in radians: atan2 of sin and cos, both read off R, keeps small
// angles accurate where acos((trace - 1) / 2) loses half the digits.
double angle(const Mat3& r) {
  const double s = 0.5 * norm({r[7] - r[5], r[2] - r[6], r[3] - r[1]});
  const double c = 0.5 * (r[0] + r[4] + r[8] - 1);
  return std::atan2(s, c);
}

std::string num(double v) {
  std::ostringstream s;
  s.precision(10);
  s << v;
  return s.str();
}

const char* alignment_name(Alignment a) {
  return a == Alignment::Sim3 ? "Sim(3)" : a == Alignment::SE3 ? "SE(3)" : "no";
}

// Pose pairs as evo's RPE forms them (filters.py: by index or by travelled path).
std::vector<std::pair<size_t, size_t>> rpe_pairs(const std::vector<Rigid>& p,
                                                 const TrajectoryOptions& o) {
  std::vector<std::pair<size_t, size_t>> pairs;
  const size_t n = p.size();
  if (o.delta_unit == DeltaUnit::Frames) {
    const auto d = static_cast<size_t>(o.delta);
    if (o.all_pairs) {
      for (size_t i = 0; i + d < n; ++i) pairs.emplace_back(i, i + d);
    } else {
      for (size_t i = 0; i + d < n; i += d) pairs.emplace_back(i, i + d);
    }
    return pairs;
  }
  std::vector<double> path(n, 0.0);  // travelled distance from the first pose
  for (size_t i = 1; i < n; ++i) path[i] = path[i - 1] + norm(sub(p[i].t, p[i - 1].t));
  if (o.all_pairs) {
    // For each start, the pose whose path length from it is nearest `delta` (the first of
    // equals), kept when within 10 % of it (evo's default relative tolerance).
    const double tol = 0.1 * o.delta;
    for (size_t i = 0; i < n; ++i) {
      const double target = path[i] + o.delta;
      auto k = static_cast<size_t>(
          std::lower_bound(path.begin() + static_cast<std::ptrdiff_t>(i), path.end(), target) -
          path.begin());
      size_t best = n;
      double best_res = 0;
      for (size_t c : {k == 0 ? n : k - 1, k}) {
        if (c >= n || c < i) continue;
        const double res = std::fabs(path[c] - target);
        if (best == n || res < best_res) best = c, best_res = res;
      }
      if (best == n) continue;
      // The first of a run of equal path lengths (a camera standing still).
      while (best > i && path[best - 1] == path[best]) --best;
      if (best > i && best_res <= tol) pairs.emplace_back(i, best);
    }
    return pairs;
  }
  std::vector<size_t> ids;
  double since = 0;
  for (size_t i = 0; i < n; ++i) {
    if (i > 0) since += norm(sub(p[i].t, p[i - 1].t));
    if (since >= o.delta) {
      ids.push_back(i);
      since = 0;
    }
  }
  for (size_t k = 1; k < ids.size(); ++k) pairs.emplace_back(ids[k - 1], ids[k]);
  return pairs;
}

std::string time_range(const Trajectory& t) {
  const auto [lo, hi] = std::minmax_element(t.stamps.begin(), t.stamps.end());
  return num(*lo) + " to " + num(*hi);
}

}  // namespace

TrajectoryReport evaluate_trajectory(const Trajectory& est, const Trajectory& ref,
                                     const TrajectoryOptions& o) {
  LINGBOT_CHECK_ARG(o.max_time_diff > 0,
                    "the maximum time difference must be > 0, got " + num(o.max_time_diff));
  if (o.delta_unit == DeltaUnit::Frames)
    LINGBOT_CHECK_ARG(o.delta >= 1 && o.delta == std::floor(o.delta) && o.delta < 1e9,
                      "the RPE delta in frames must be a whole number >= 1, got " + num(o.delta));
  else
    LINGBOT_CHECK_ARG(o.delta > 0 && std::isfinite(o.delta),
                      "the RPE delta in metres must be > 0, got " + num(o.delta));
  LINGBOT_CHECK_ARG(est.size() == est.stamps.size() && ref.size() == ref.stamps.size(),
                    "a trajectory needs one timestamp per pose");
  LINGBOT_CHECK_ARG(est.size() > 0 && ref.size() > 0, "empty trajectory");
  // Frame-indexed trajectories of different lengths would match their common prefix silently;
  // the usual cause is a wrong file or a run over other frames, so say so instead.
  if (est.indexed && ref.indexed && est.size() != ref.size())
    throw Error("mismatched lengths: " + est.name + " has " + std::to_string(est.size()) +
                    " poses, " + ref.name + " " + std::to_string(ref.size()) +
                    " (both are indexed by frame, so they must have one pose per frame each)",
                ErrorKind::InvalidArgument);

  TrajectoryReport r;
  r.estimate_poses = est.size();
  r.reference_poses = ref.size();
  r.alignment = o.alignment;
  r.delta = o.delta;
  r.delta_unit = o.delta_unit;
  r.all_pairs = o.all_pairs;
  r.matches = associate(est.stamps, ref.stamps, o.max_time_diff, o.time_offset);
  r.matched = r.matches.size();
  const size_t need = o.alignment == Alignment::Sim3 ? 3 : 2;
  if (r.matched < need) {
    std::string why = "too few matches: " + std::to_string(r.matched) + " of " + est.name + "'s " +
                      std::to_string(est.size()) + " poses have a pose of " + ref.name +
                      " within " + num(o.max_time_diff) + " s; " + alignment_name(o.alignment) +
                      " alignment needs at least " + std::to_string(need);
    if (est.indexed != ref.indexed)
      why += " (times " + time_range(est) + " against " + time_range(ref) +
             ": a frame-indexed trajectory needs the frames' times, --est-times)";
    throw Error(why, ErrorKind::InvalidArgument);
  }

  std::vector<Vec3> from(r.matched), to(r.matched);
  std::vector<Rigid> p(r.matched), q(r.matched);
  for (size_t k = 0; k < r.matched; ++k) {
    p[k] = rigid(est.poses[r.matches[k].first]);
    q[k] = rigid(ref.poses[r.matches[k].second]);
    from[k] = p[k].t;
    to[k] = q[k].t;
  }
  if (o.alignment != Alignment::None)
    r.transform = umeyama(from, to, o.alignment == Alignment::Sim3);
  const Similarity& s = r.transform;

  // The aligned estimate: x -> s R x + t moves the centres; the orientations turn by R.
  r.aligned.resize(r.matched);
  r.reference = to;
  r.ate_errors.resize(r.matched);
  for (size_t k = 0; k < r.matched; ++k) {
    const Vec3 rx = mul(s.rotation, p[k].t);
    for (int i = 0; i < 3; ++i) r.aligned[k][i] = s.scale * rx[i] + s.translation[i];
    p[k] = {mul(s.rotation, p[k].r), r.aligned[k]};
    r.ate_errors[k] = norm(sub(r.aligned[k], to[k]));
  }
  r.ate = statistics(r.ate_errors);

  const auto pairs = rpe_pairs(p, o);
  if (pairs.empty())
    throw Error("RPE: a delta of " + num(o.delta) +
                    (o.delta_unit == DeltaUnit::Frames ? " frames" : " m") +
                    " gives no pair among " + std::to_string(r.matched) +
                    " matched poses; use a smaller --delta",
                ErrorKind::InvalidArgument);
  std::vector<double> et, er;
  for (const auto& [i, j] : pairs) {
    const Rigid e = between(between(q[i], q[j]), between(p[i], p[j]));
    et.push_back(norm(e.t));
    er.push_back(angle(e.r) * 180.0 / M_PI);
  }
  r.rpe_translation = statistics(et);
  r.rpe_rotation_deg = statistics(er);
  return r;
}

}  // namespace lingbot::eval
