// Public API: the loop-closure back-end. A Sim(3) pose graph over keyframes (or over windows in
// windowed mode), optimized with Ceres, and a background worker that the stream feeds without
// blocking:
//
//   lingbot::LoopCloser closer({}, [](const lingbot::LoopReport& r) { ... });
//   // per keyframe, from the stream's thread (c2w: FrameResult::c2w, row-major 3x4):
//   closer.add_keyframe(frame.index, lingbot::Sim3::from_c2w(frame.c2w.data()));
//   // per verified loop (place recognition + geometric verification):
//   closer.add_loop({.from = i, .to = j, .relative = T_ij, .score = inliers});
//   // any time: the latest corrected pose of any frame (keyframe or not)
//   lingbot::Sim3 p = closer.corrections()->correct(frame.index, streamed);
//   closer.finish();  // at the end of a run: the last solve done, corrections final
//
// Conventions. A node's pose T_i is camera (or window) to world: a point p in camera i's own
// coordinates, in the stream's units at i, is at s R p + t in the world. The stream's poses are
// Sim(3) with s = 1; the optimizer gives each keyframe its own scale, which absorbs the model's
// scale drift (the frame's depths and points are multiplied by it). An edge (from i, to j)
// measures T_i^-1 T_j: it maps j's camera coordinates (j's units) to i's (i's units), so its scale
// is (a length in i's units) / (the same length in j's units).
//
// loop_closure_available() is false when the library was built without Ceres; the types and the
// bookkeeping work then, and PoseGraph::optimize / LoopCloser throw Error.
//
// Loop detection (descriptors, verification, the detector) is in lingbot/loop_detect.h, the
// loop edge measured by the model in lingbot/loop_edge.h, both included here: one header for
// loop closure.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace lingbot {

// A similarity transform x -> s R x + t. R as a unit quaternion (x, y, z, w), the order the
// model's pose encoding uses.
struct Sim3 {
  std::array<double, 4> q{0, 0, 0, 1};
  std::array<double, 3> t{0, 0, 0};
  double s = 1;

  // From a row-major 3x4 [R | t] (FrameResult::c2w / w2c) with scale `s`. R is re-orthonormalised
  // (float poses are not exactly orthonormal).
  static Sim3 from_c2w(const float* rt3x4, double s = 1);
  static Sim3 from_rt(const double* r3x3, const double* t3, double s = 1);
  // From a row-major 4x4 [sR | t; 0 0 0 1]; s = cbrt(det(sR)), which must be > 0.
  static Sim3 from_matrix(const std::array<double, 16>& m);

  std::array<double, 9> rotation() const;  // row-major 3x3 R
  std::array<double, 16> matrix() const;   // row-major 4x4 [sR | t; 0 0 0 1]
  std::array<float, 12> rt() const;        // row-major 3x4 [R | t], without the scale
  Sim3 inverse() const;
  std::array<double, 3> act(const std::array<double, 3>& p) const;  // s R p + t
};
Sim3 operator*(const Sim3& a, const Sim3& b);  // a after b: (a * b).act(p) = a.act(b.act(p))

// The tangent space: xi = (v[3], w[3], sigma), the 4x4 generator [[hat(w) + sigma I, v], [0, 0]];
// exp(xi) = (s = e^sigma, R = exp(hat(w)), t = W v). sim3_log inverts it for rotations below pi.
using Sim3Tangent = std::array<double, 7>;
Sim3 sim3_exp(const Sim3Tangent& xi);
Sim3Tangent sim3_log(const Sim3& T);

// One edge's measured T_from^-1 T_to.
struct PoseEdge {
  int64_t from = 0, to = 0;  // node ids (frame indices of keyframes, or window numbers)
  Sim3 relative;
  double score = 0;  // a loop's verification score (inliers), reported back; not a weight
};

enum class RobustLoss { None, Huber, Cauchy };

struct PoseGraphOptions {
  // Standard deviations of an edge's residual: translation in units of the median odometry step
  // length (so the defaults hold whatever the units of the scene), rotation in radians, scale as
  // log(s). The odometry ones must cover the model's drift per keyframe: a loop is accepted when
  // the discrepancy it closes is plausible for the odometry between its two ends.
  double odometry_sigma_translation = 0.05;
  double odometry_sigma_rotation = 0.005;
  double odometry_sigma_scale = 0.005;
  // The gate's allowance for systematic drift: a bias shared by every odometry step (the
  // model's scale creeps the same way for hundreds of keyframes), log scale and radians a
  // keyframe. It widens the gate with the chain's length n (as n, not sqrt(n)).
  double drift_sigma_scale = 0.005;
  double drift_sigma_rotation = 0.002;
  double loop_sigma_translation = 0.2;
  double loop_sigma_rotation = 0.02;
  double loop_sigma_scale = 0.02;
  RobustLoss loss = RobustLoss::Cauchy;  // on loop edges; odometry is plain least squares
  // In standard deviations (of the normalised residual). Narrower than ~3 lets the odometry's
  // systematic drift pry loops open at the ends of a long chain.
  double loss_scale = 3;
  // A loop is switched off when (a) its discrepancy with the odometry chain between its ends
  // (Mahalanobis distance with the chain's propagated covariance: the odometry noise, the drift
  // bias and the loop's own) exceeds `gate`, or (b) its
  // normalised residual after the solve exceeds `outlier_threshold`; the graph is then solved
  // again without it, at most `outlier_rounds` times. <= 0 turns either test off.
  double gate = 20;
  double outlier_threshold = 5;
  int outlier_rounds = 6;
  // Graduated non-convexity: the robust loss starts this many times wider than `loss_scale`
  // and narrows by a factor 4 a stage, so that loops far from the first estimate still pull.
  double anneal_start = 256;
  int max_iterations = 50;  // per Ceres solve
  int threads = 1;          // Ceres threads (1: leave the cores to the stream)
};

struct LoopOutcome {
  int64_t from = 0, to = 0;
  double score = 0;
  bool accepted = false;
  double residual = 0;  // normalised residual after the solve (or the gate's distance if gated)
  std::string reason;   // why it was switched off: "gate" or "residual"
};

struct PoseGraphSummary {
  std::vector<LoopOutcome> loops;  // every loop edge of the graph, in the order added
  int accepted = 0, rejected = 0;
  double initial_cost = 0, final_cost = 0;  // 0.5 sum of squared normalised residuals
  int solves = 0;                           // Ceres runs (annealing stages and re-solves)
  double seconds = 0;
  bool cancelled = false;
  // How far the solve moved the keyframes (the correction size), against the estimate before it.
  double max_translation = 0;  // world units
  double max_rotation_deg = 0;
  double max_scale_change = 0;  // max |log s| of the corrections
};

// Per node, the correction C = T_optimized * T_streamed^-1 (a world-frame Sim(3)); a frame that is
// not a node follows its nearest node's correction (by id; before the first node, the first;
// ties to the earlier): its optimized pose is C * streamed.
struct PoseCorrections {
  std::vector<int64_t> nodes;  // ascending
  std::vector<Sim3> corrections;
  int64_t version = 0;  // increases with each published solve

  bool empty() const { return nodes.empty(); }
  const Sim3* of(int64_t node) const;  // the node's own correction, nullptr if none
  Sim3 nearest(int64_t frame) const;   // identity when empty
  Sim3 correct(int64_t frame, const Sim3& streamed) const { return nearest(frame) * streamed; }
  // Every frame's streamed c2w (row-major 3x4, frame i = index i) to its optimized pose.
  std::vector<Sim3> correct_all(const std::vector<std::array<float, 12>>& streamed_c2w) const;
};

// The graph itself, synchronous (LoopCloser runs it on a thread). Nodes are added in increasing
// id order; each node after the first is joined to the one before by an odometry edge measured
// from their streamed poses (or given explicitly). The first node is fixed (the gauge).
class PoseGraph {
 public:
  explicit PoseGraph(PoseGraphOptions options = {});
  ~PoseGraph();
  PoseGraph(PoseGraph&&) noexcept;
  PoseGraph& operator=(PoseGraph&&) noexcept;

  // A node at its streamed pose; its estimate starts as the previous node's correction applied
  // to it. Throws Error unless id is above the last node's.
  void add_node(int64_t id, const Sim3& streamed);
  // The same with the odometry edge to the previous node measured otherwise (windowed mode: the
  // windows' alignment); `from_previous` is T_prev^-1 T_id.
  void add_node(int64_t id, const Sim3& streamed, const Sim3& from_previous);
  // A loop edge between two existing nodes. Throws Error for unknown nodes or from == to.
  void add_loop(const PoseEdge& loop);

  // Solves the graph from the current estimate, with outlier loops switched off (every loop is
  // judged again at each solve), and keeps the result. `cancel` (optional) aborts it between
  // iterations (the estimate is then unchanged).
  PoseGraphSummary optimize(const std::atomic<bool>* cancel = nullptr);

  int64_t size() const;
  int64_t loops() const;
  const std::vector<int64_t>& ids() const;
  Sim3 streamed(int64_t id) const;
  Sim3 estimate(int64_t id) const;  // optimized pose (streamed until the first optimize)
  PoseCorrections corrections() const;
  const PoseGraphOptions& options() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Windowed mode: a loop between keyframe a of window u and keyframe b of window v, as an edge
// between the two windows' nodes (a window's node pose: its alignment, window frame to world).
// `pose_a`/`pose_b`: the keyframes' poses in their own window's frame; `a_to_b`: the loop's
// measured T_a^-1 T_b.
PoseEdge window_loop_edge(int64_t u, const Sim3& pose_a, int64_t v, const Sim3& pose_b,
                          const Sim3& a_to_b, double score = 0);

// What a solve did, for the run's report and the viewer (one per published correction).
struct LoopReport {
  std::vector<LoopOutcome> new_loops;  // the loops added since the previous solve
  PoseGraphSummary summary;            // the whole solve
  int64_t version = 0;                 // PoseCorrections::version it published
  int64_t nodes = 0;
};

// The background optimizer. add_* are called from the stream's thread and never wait for a
// solve (they take a lock for a push); a loop wakes the worker, which moves what was added into
// its graph, solves it and publishes the corrections, then calls `on_report` on its own thread.
// Loops that arrive during a solve are solved together in the next one. Memory: the graph
// (about 200 bytes a node and a loop) and one published copy of the corrections.
class LoopCloser {
 public:
  using ReportCallback = std::function<void(const LoopReport&)>;
  explicit LoopCloser(PoseGraphOptions options = {}, ReportCallback on_report = {});
  ~LoopCloser();  // stops: a solve in progress is cancelled, the thread joined
  LoopCloser(const LoopCloser&) = delete;
  LoopCloser& operator=(const LoopCloser&) = delete;

  void add_keyframe(int64_t frame, const Sim3& streamed_c2w);
  void add_node(int64_t id, const Sim3& streamed, const Sim3& from_previous);  // windowed
  void add_loop(const PoseEdge& loop);

  // The latest published corrections (never null; empty before the first solve).
  std::shared_ptr<const PoseCorrections> corrections() const;
  // Waits until everything added so far is solved (when a loop is pending) and published.
  void finish();
  // The first error a solve threw (then the worker stops solving), empty if none.
  std::string error() const;
  int64_t solves() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// False when the library was built without Ceres (PoseGraph::optimize and LoopCloser throw).
bool loop_closure_available();

}  // namespace lingbot

#include "lingbot/loop_detect.h"
#include "lingbot/loop_edge.h"
