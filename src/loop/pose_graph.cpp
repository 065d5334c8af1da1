// The pose graph's bookkeeping and its outlier handling: nodes and edges, the gate of each loop
// against the odometry chain, the annealed robust solve, the residual test with re-solves, and
// the corrections. The least squares itself is graph_solver.h's.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <numbers>
#include <string>

#include "lingbot/error.h"
#include "lingbot/loop.h"
#include "loop/graph_solver.h"

namespace lingbot {

using loop_detail::EdgeMeasurement;
using loop_detail::EdgeSigmas;
using loop_detail::SolverEdge;
using loop_detail::SolverNode;

namespace {

using Mat7 = std::array<double, 49>;

EdgeMeasurement measurement(const Sim3& z) {
  EdgeMeasurement m;
  for (int k = 0; k < 4; ++k) m.q[k] = z.q[k];
  for (int k = 0; k < 3; ++k) m.t[k] = z.t[k];
  m.l = std::log(z.s);
  return m;
}

SolverNode to_node(const Sim3& p) {
  SolverNode n;
  for (int k = 0; k < 4; ++k) n.q[k] = p.q[k];
  for (int k = 0; k < 3; ++k) n.t[k] = p.t[k];
  n.l = std::log(p.s);
  return n;
}

Sim3 from_node(const SolverNode& n) {
  Sim3 p;
  double norm = 0;
  for (int k = 0; k < 4; ++k) norm += n.q[k] * n.q[k];
  norm = std::sqrt(norm);
  const double sign = n.q[3] < 0 ? -1 : 1;
  for (int k = 0; k < 4; ++k) p.q[k] = sign * n.q[k] / norm;
  for (int k = 0; k < 3; ++k) p.t[k] = n.t[k];
  p.s = std::exp(n.l);
  return p;
}

std::array<double, 7> residual(const SolverNode& a, const SolverNode& b, const EdgeMeasurement& z,
                               const EdgeSigmas& s) {
  std::array<double, 7> r;
  loop_detail::edge_residual(a.q, a.t, &a.l, b.q, b.t, &b.l, z, s, r.data());
  return r;
}

double norm7(const std::array<double, 7>& r) {
  double n = 0;
  for (double v : r) n += v * v;
  return std::sqrt(n);
}

// The adjoint of T on the tangent (v, w, sigma): T exp(xi) T^-1 = exp(Ad xi),
// Ad = [[sR, hat(t) R, -t], [0, R, 0], [0, 0, 1]].
Mat7 adjoint(const Sim3& T) {
  const std::array<double, 9> r = T.rotation();
  const double h[9] = {0, -T.t[2], T.t[1], T.t[2], 0, -T.t[0], -T.t[1], T.t[0], 0};
  Mat7 a{};
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j) {
      a[i * 7 + j] = T.s * r[i * 3 + j];
      double hr = 0;
      for (int k = 0; k < 3; ++k) hr += h[i * 3 + k] * r[k * 3 + j];
      a[i * 7 + 3 + j] = hr;
      a[(3 + i) * 7 + 3 + j] = r[i * 3 + j];
    }
  for (int i = 0; i < 3; ++i) a[i * 7 + 6] = -T.t[i];
  a[48] = 1;
  return a;
}

// a S a^T
Mat7 congruence(const Mat7& a, const Mat7& s) {
  Mat7 as{}, out{};
  for (int i = 0; i < 7; ++i)
    for (int k = 0; k < 7; ++k) {
      const double v = a[i * 7 + k];
      if (v == 0) continue;
      for (int j = 0; j < 7; ++j) as[i * 7 + j] += v * s[k * 7 + j];
    }
  for (int i = 0; i < 7; ++i)
    for (int j = 0; j < 7; ++j) {
      double v = 0;
      for (int k = 0; k < 7; ++k) v += as[i * 7 + k] * a[j * 7 + k];
      out[i * 7 + j] = v;
    }
  return out;
}

// sqrt(e^T S^-1 e) by Cholesky; infinity when S is not positive definite.
double mahalanobis(Mat7 s, std::array<double, 7> e) {
  for (int j = 0; j < 7; ++j) {
    double d = s[j * 7 + j];
    for (int k = 0; k < j; ++k) d -= s[j * 7 + k] * s[j * 7 + k];
    if (!(d > 0)) return INFINITY;
    d = std::sqrt(d);
    s[j * 7 + j] = d;
    for (int i = j + 1; i < 7; ++i) {
      double v = s[i * 7 + j];
      for (int k = 0; k < j; ++k) v -= s[i * 7 + k] * s[j * 7 + k];
      s[i * 7 + j] = v / d;
    }
  }
  // Solve L y = e; the distance is |y|.
  double n = 0;
  for (int i = 0; i < 7; ++i) {
    double v = e[i];
    for (int k = 0; k < i; ++k) v -= s[i * 7 + k] * e[k];
    e[i] = v / s[i * 7 + i];
    n += e[i] * e[i];
  }
  return std::sqrt(n);
}

double rotation_angle(const Sim3& a, const Sim3& b) {  // the angle of a b^-1
  const double dot =
      std::abs(a.q[0] * b.q[0] + a.q[1] * b.q[1] + a.q[2] * b.q[2] + a.q[3] * b.q[3]);
  return 2 * std::acos(std::min(1.0, dot));
}

}  // namespace

struct PoseGraph::Impl {
  PoseGraphOptions options;
  std::vector<int64_t> ids;
  std::vector<Sim3> streamed, estimate;
  std::vector<Sim3> odometry;  // odometry[k]: T_(k-1)^-1 T_k as measured; odometry[0] unused
  std::vector<PoseEdge> loops;

  int64_t position(int64_t id) const {
    const auto it = std::lower_bound(ids.begin(), ids.end(), id);
    return it != ids.end() && *it == id ? it - ids.begin() : -1;
  }

  void add(int64_t id, const Sim3& pose, const Sim3* from_previous) {
    LINGBOT_CHECK_ARG(ids.empty() || id > ids.back(),
                      "pose graph: node " + std::to_string(id) + " is not after the last node (" +
                          (ids.empty() ? std::string("none") : std::to_string(ids.back())) + ")");
    LINGBOT_CHECK_ARG(std::isfinite(pose.s) && pose.s > 0,
                      "pose graph: node scale must be positive");
    for (double v : pose.t) LINGBOT_CHECK_ARG(std::isfinite(v), "pose graph: node is not finite");
    if (ids.empty()) {
      odometry.push_back(Sim3{});
      estimate.push_back(pose);
    } else {
      const Sim3 z = from_previous ? *from_previous : streamed.back().inverse() * pose;
      odometry.push_back(z);
      // Follows the previous node's correction, so that the odometry edge holds exactly.
      estimate.push_back(estimate.back() * z);
    }
    ids.push_back(id);
    streamed.push_back(pose);
  }

  // The median odometry step length: the unit of the translation sigmas.
  double unit_length() const {
    std::vector<double> len;
    for (size_t k = 1; k < odometry.size(); ++k) {
      const auto& t = odometry[k].t;
      const double n = std::sqrt(t[0] * t[0] + t[1] * t[1] + t[2] * t[2]);
      if (n > 0 && std::isfinite(n)) len.push_back(n);
    }
    if (len.empty()) return 1;
    std::nth_element(len.begin(), len.begin() + len.size() / 2, len.end());
    return len[len.size() / 2];
  }

  // The loop's discrepancy with the odometry chain between its ends, as a Mahalanobis distance:
  // the chain's covariance propagated edge by edge (right perturbations: Sigma <- Ad(Z^-1)
  // Sigma Ad(Z^-1)^T + Q), plus the loop's own.
  //
  // The drift bias b (one tangent vector shared by every step) reaches the chain's end as
  // (sum_k A_k) b, A_k the adjoint that carries step k's perturbation to the end; the sum is
  // propagated with the covariance (S <- Ad(Z^-1) S + I) and adds S Sigma_b S^T.
  double gate_distance(int64_t a, int64_t b, const Sim3& z, const EdgeSigmas& odo,
                       const EdgeSigmas& lp) const {
    Sim3 meas = z;
    if (a > b) std::swap(a, b), meas = z.inverse();
    Mat7 cov{}, sum{};
    Sim3 chain;
    const double q_odo[7] = {odo.translation * odo.translation,
                             odo.translation * odo.translation,
                             odo.translation * odo.translation,
                             odo.rotation * odo.rotation,
                             odo.rotation * odo.rotation,
                             odo.rotation * odo.rotation,
                             odo.scale * odo.scale};
    for (int64_t k = a + 1; k <= b; ++k) {
      const Sim3& step = odometry[k];
      const Mat7 ad = adjoint(step.inverse());
      cov = congruence(ad, cov);
      for (int d = 0; d < 7; ++d) cov[d * 8] += q_odo[d];
      Mat7 next{};
      for (int i = 0; i < 7; ++i)
        for (int j = 0; j < 7; ++j) {
          double v = 0;
          for (int m = 0; m < 7; ++m) v += ad[i * 7 + m] * sum[m * 7 + j];
          next[i * 7 + j] = v;
        }
      for (int d = 0; d < 7; ++d) next[d * 8] += 1;
      sum = next;
      chain = chain * step;
    }
    Mat7 bias{};
    const double dr = options.drift_sigma_rotation, ds = options.drift_sigma_scale;
    bias[24] = bias[32] = bias[40] = dr * dr;
    bias[48] = ds * ds;
    const Mat7 systematic = congruence(sum, bias);
    for (int i = 0; i < 49; ++i) cov[i] += systematic[i];
    cov[0] += lp.translation * lp.translation, cov[8] += lp.translation * lp.translation;
    cov[16] += lp.translation * lp.translation;
    cov[24] += lp.rotation * lp.rotation, cov[32] += lp.rotation * lp.rotation;
    cov[40] += lp.rotation * lp.rotation, cov[48] += lp.scale * lp.scale;
    const SolverNode origin = to_node(Sim3{});
    const EdgeSigmas unit{};
    return mahalanobis(cov, residual(origin, to_node(chain), measurement(meas), unit));
  }
};

PoseGraph::PoseGraph(PoseGraphOptions options) : impl_(std::make_unique<Impl>()) {
  const PoseGraphOptions& o = options;
  for (double s : {o.odometry_sigma_translation, o.odometry_sigma_rotation, o.odometry_sigma_scale,
                   o.loop_sigma_translation, o.loop_sigma_rotation, o.loop_sigma_scale})
    LINGBOT_CHECK_ARG(std::isfinite(s) && s > 0, "pose graph: sigmas must be positive");
  for (double s : {o.drift_sigma_rotation, o.drift_sigma_scale})
    LINGBOT_CHECK_ARG(std::isfinite(s) && s >= 0, "pose graph: drift sigmas must be >= 0");
  LINGBOT_CHECK_ARG(std::isfinite(o.loss_scale) && o.loss_scale > 0,
                    "pose graph: loss_scale must be positive");
  LINGBOT_CHECK_ARG(o.max_iterations > 0 && o.threads > 0 && o.outlier_rounds >= 0,
                    "pose graph: max_iterations and threads must be positive");
  LINGBOT_CHECK_ARG(std::isfinite(o.anneal_start) && o.anneal_start >= 1,
                    "pose graph: anneal_start must be at least 1");
  impl_->options = options;
}
PoseGraph::~PoseGraph() = default;
PoseGraph::PoseGraph(PoseGraph&&) noexcept = default;
PoseGraph& PoseGraph::operator=(PoseGraph&&) noexcept = default;

void PoseGraph::add_node(int64_t id, const Sim3& streamed) {
  impl_->add(id, streamed, nullptr);
}
void PoseGraph::add_node(int64_t id, const Sim3& streamed, const Sim3& from_previous) {
  impl_->add(id, streamed, &from_previous);
}

void PoseGraph::add_loop(const PoseEdge& loop) {
  LINGBOT_CHECK_ARG(impl_->position(loop.from) >= 0 && impl_->position(loop.to) >= 0,
                    "pose graph: loop " + std::to_string(loop.from) + " -> " +
                        std::to_string(loop.to) + " names a node that is not in the graph");
  LINGBOT_CHECK_ARG(loop.from != loop.to, "pose graph: a loop must join two different nodes");
  LINGBOT_CHECK_ARG(std::isfinite(loop.relative.s) && loop.relative.s > 0,
                    "pose graph: loop scale must be positive");
  for (double v : loop.relative.t)
    LINGBOT_CHECK_ARG(std::isfinite(v), "pose graph: loop translation is not finite");
  impl_->loops.push_back(loop);
}

PoseGraphSummary PoseGraph::optimize(const std::atomic<bool>* cancel) {
  const auto t0 = std::chrono::steady_clock::now();
  Impl& g = *impl_;
  const PoseGraphOptions& o = g.options;
  PoseGraphSummary summary;
  summary.loops.resize(g.loops.size());
  for (size_t k = 0; k < g.loops.size(); ++k) {
    summary.loops[k].from = g.loops[k].from;
    summary.loops[k].to = g.loops[k].to;
    summary.loops[k].score = g.loops[k].score;
  }
  const int64_t n = static_cast<int64_t>(g.ids.size());
  if (n < 2 || g.loops.empty()) {
    summary.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return summary;
  }
  if (!loop_detail::solver_available()) loop_detail::solve_graph({});  // throws why

  const double unit = g.unit_length();
  const EdgeSigmas odo{o.odometry_sigma_translation * unit, o.odometry_sigma_rotation,
                       o.odometry_sigma_scale};
  const EdgeSigmas lp{o.loop_sigma_translation * unit, o.loop_sigma_rotation, o.loop_sigma_scale};

  std::vector<SolverEdge> edges;
  for (int64_t k = 1; k < n; ++k)
    edges.push_back(
        {static_cast<int>(k - 1), static_cast<int>(k), measurement(g.odometry[k]), odo, false});
  const size_t n_odometry = edges.size();
  std::vector<size_t> active;  // loop numbers still switched on
  for (size_t k = 0; k < g.loops.size(); ++k) {
    const PoseEdge& l = g.loops[k];
    const int64_t a = g.position(l.from), b = g.position(l.to);
    if (o.gate > 0) {
      const double d = g.gate_distance(a, b, l.relative, odo, lp);
      if (!(d <= o.gate)) {
        summary.loops[k].residual = d;
        summary.loops[k].reason = "gate";
        continue;
      }
    }
    active.push_back(k);
  }

  std::vector<SolverNode> start;
  start.reserve(n);
  for (const Sim3& p : g.estimate) start.push_back(to_node(p));
  std::vector<SolverNode> nodes = start;
  double initial_cost = -1, final_cost = 0;

  // One round: the annealed robust solve from `start` over the active loops.
  auto solve_round = [&]() -> bool {
    edges.resize(n_odometry);
    for (size_t k : active) {
      const PoseEdge& l = g.loops[k];
      edges.push_back({static_cast<int>(g.position(l.from)), static_cast<int>(g.position(l.to)),
                       measurement(l.relative), lp, true});
    }
    nodes = start;
    double scale = o.loss == RobustLoss::None ? o.loss_scale : o.loss_scale * o.anneal_start;
    for (;;) {
      loop_detail::SolveRequest req;
      req.nodes = &nodes;
      req.edges = &edges;
      req.loss = o.loss;
      req.loss_scale = scale;
      req.max_iterations = o.max_iterations;
      req.threads = o.threads;
      req.cancel = cancel;
      const loop_detail::SolveResult r = loop_detail::solve_graph(req);
      ++summary.solves;
      if (r.cancelled) return false;
      if (initial_cost < 0) initial_cost = r.initial_cost;
      final_cost = r.final_cost;
      if (scale <= o.loss_scale) break;
      // Narrow by 4, or straight to the largest loop residual when all are inside it already
      // (the stages between would change nothing).
      double widest = 0;
      for (size_t e = n_odometry; e < edges.size(); ++e)
        widest = std::max(widest, norm7(residual(nodes[edges[e].i], nodes[edges[e].j], edges[e].z,
                                                 edges[e].sigma)));
      scale = std::max(o.loss_scale, std::min(scale / 4, widest));
    }
    return true;
  };

  std::vector<size_t> dropped;  // by the residual test
  for (int round = 0;; ++round) {
    if (!solve_round()) {
      summary.cancelled = true;
      break;
    }
    if (o.outlier_threshold <= 0) break;
    std::vector<size_t> keep, drop;
    double worst = 0;
    for (size_t k : active) {
      const PoseEdge& l = g.loops[k];
      const double r = norm7(residual(nodes[g.position(l.from)], nodes[g.position(l.to)],
                                      measurement(l.relative), lp));
      summary.loops[k].residual = r;
      worst = std::max(worst, r);
    }
    // Drop those above the threshold that are also within a factor 2 of the worst: a gross
    // outlier distorts the solution around it, so the loops it pulled are judged again once it
    // is gone rather than with it.
    for (size_t k : active) {
      const double r = summary.loops[k].residual;
      (r > o.outlier_threshold && r >= worst / 2 ? drop : keep).push_back(k);
    }
    // Loops dropped in an earlier round come back when the solution without the outliers now
    // agrees with them (they were misjudged while an outlier bent the graph).
    std::vector<size_t> back;
    if (drop.empty()) {
      for (size_t k : dropped) {
        const PoseEdge& l = g.loops[k];
        const double r = norm7(residual(nodes[g.position(l.from)], nodes[g.position(l.to)],
                                        measurement(l.relative), lp));
        summary.loops[k].residual = r;
        if (r <= o.outlier_threshold) back.push_back(k);
      }
      if (back.empty() || round + 1 >= std::max(1, o.outlier_rounds)) break;
      for (size_t k : back) {
        summary.loops[k].reason.clear();
        keep.push_back(k);
        dropped.erase(std::find(dropped.begin(), dropped.end(), k));
      }
      std::sort(keep.begin(), keep.end());
      active = keep;
      continue;
    }
    for (size_t k : drop) summary.loops[k].reason = "residual", dropped.push_back(k);
    active = keep;
    if (round + 1 >= std::max(1, o.outlier_rounds)) {
      // Out of rounds: solve without the dropped ones, judge no further.
      if (!solve_round()) summary.cancelled = true;
      break;
    }
  }

  if (!summary.cancelled) {
    for (size_t k : active) summary.loops[k].accepted = true;
    for (int64_t i = 0; i < n; ++i) {
      const Sim3 p = from_node(nodes[i]);
      const Sim3& old = g.estimate[i];
      const double dx = p.t[0] - old.t[0], dy = p.t[1] - old.t[1], dz = p.t[2] - old.t[2];
      summary.max_translation =
          std::max(summary.max_translation, std::sqrt(dx * dx + dy * dy + dz * dz));
      summary.max_rotation_deg =
          std::max(summary.max_rotation_deg, rotation_angle(p, old) * 180 / std::numbers::pi);
      summary.max_scale_change =
          std::max(summary.max_scale_change, std::abs(std::log(p.s / old.s)));
      g.estimate[i] = p;
    }
    summary.initial_cost = initial_cost;
    summary.final_cost = final_cost;
  }
  for (const LoopOutcome& l : summary.loops) (l.accepted ? summary.accepted : summary.rejected)++;
  if (summary.cancelled) summary.accepted = 0, summary.rejected = 0;
  summary.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return summary;
}

int64_t PoseGraph::size() const {
  return static_cast<int64_t>(impl_->ids.size());
}
int64_t PoseGraph::loops() const {
  return static_cast<int64_t>(impl_->loops.size());
}
const std::vector<int64_t>& PoseGraph::ids() const {
  return impl_->ids;
}
const PoseGraphOptions& PoseGraph::options() const {
  return impl_->options;
}

Sim3 PoseGraph::streamed(int64_t id) const {
  const int64_t p = impl_->position(id);
  LINGBOT_CHECK_ARG(p >= 0, "pose graph: no node " + std::to_string(id));
  return impl_->streamed[p];
}

Sim3 PoseGraph::estimate(int64_t id) const {
  const int64_t p = impl_->position(id);
  LINGBOT_CHECK_ARG(p >= 0, "pose graph: no node " + std::to_string(id));
  return impl_->estimate[p];
}

PoseCorrections PoseGraph::corrections() const {
  PoseCorrections c;
  c.nodes = impl_->ids;
  c.corrections.reserve(impl_->ids.size());
  for (size_t i = 0; i < impl_->ids.size(); ++i)
    c.corrections.push_back(impl_->estimate[i] * impl_->streamed[i].inverse());
  return c;
}

PoseEdge window_loop_edge(int64_t u, const Sim3& pose_a, int64_t v, const Sim3& pose_b,
                          const Sim3& a_to_b, double score) {
  // W_u P_a Z = W_v P_b, so the windows' relative pose W_u^-1 W_v is P_a Z P_b^-1.
  return {u, v, pose_a * a_to_b * pose_b.inverse(), score};
}

bool loop_closure_available() {
  return loop_detail::solver_available();
}

}  // namespace lingbot
