// The pose graph's nonlinear least squares in Ceres: 7 degrees of freedom a node (a unit
// quaternion on Ceres' quaternion manifold, a translation, a log scale), one 7-vector residual an
// edge (edge_residual.h) with automatic derivatives, the robust loss on loop edges only.
#include <ceres/ceres.h>

#include <memory>

#include "loop/graph_solver.h"

namespace lingbot::loop_detail {
namespace {

struct EdgeCost {
  EdgeMeasurement z;
  EdgeSigmas sigma;
  template <typename T>
  bool operator()(const T* qi, const T* ti, const T* li, const T* qj, const T* tj, const T* lj,
                  T* residual) const {
    edge_residual(qi, ti, li, qj, tj, lj, z, sigma, residual);
    return true;
  }
};

// Aborts the solve between iterations when the owner shuts down.
class CancelCallback : public ceres::IterationCallback {
 public:
  explicit CancelCallback(const std::atomic<bool>* cancel) : cancel_(cancel) {}
  ceres::CallbackReturnType operator()(const ceres::IterationSummary&) override {
    return cancel_ && cancel_->load(std::memory_order_relaxed) ? ceres::SOLVER_ABORT
                                                               : ceres::SOLVER_CONTINUE;
  }

 private:
  const std::atomic<bool>* cancel_;
};

}  // namespace

bool solver_available() {
  return true;
}

SolveResult solve_graph(const SolveRequest& request) {
  std::vector<SolverNode>& nodes = *request.nodes;
  ceres::Problem::Options problem_options;
  // The manifold is shared by every quaternion block; the problem must not delete it.
  problem_options.manifold_ownership = ceres::DO_NOT_TAKE_OWNERSHIP;
  ceres::Problem problem(problem_options);
  ceres::EigenQuaternionManifold quaternion;  // x y z w in memory, as our nodes hold them
  for (SolverNode& n : nodes) {
    problem.AddParameterBlock(n.q, 4, &quaternion);
    problem.AddParameterBlock(n.t, 3);
    problem.AddParameterBlock(&n.l, 1);
  }
  for (const SolverEdge& e : *request.edges) {
    auto* cost =
        new ceres::AutoDiffCostFunction<EdgeCost, 7, 4, 3, 1, 4, 3, 1>(new EdgeCost{e.z, e.sigma});
    ceres::LossFunction* loss = nullptr;
    if (e.robust && request.loss == RobustLoss::Cauchy)
      loss = new ceres::CauchyLoss(request.loss_scale);
    else if (e.robust && request.loss == RobustLoss::Huber)
      loss = new ceres::HuberLoss(request.loss_scale);
    SolverNode& a = nodes[e.i];
    SolverNode& b = nodes[e.j];
    problem.AddResidualBlock(cost, loss, a.q, a.t, &a.l, b.q, b.t, &b.l);
  }
  // The gauge: the first node stays where the stream put it.
  problem.SetParameterBlockConstant(nodes[0].q);
  problem.SetParameterBlockConstant(nodes[0].t);
  problem.SetParameterBlockConstant(&nodes[0].l);

  ceres::Solver::Options options;
  options.linear_solver_type = ceres::SPARSE_NORMAL_CHOLESKY;
  options.max_num_iterations = request.max_iterations;
  options.num_threads = request.threads;
  options.logging_type = ceres::SILENT;
  options.minimizer_progress_to_stdout = false;
  options.function_tolerance = 1e-12;
  options.gradient_tolerance = 1e-14;
  options.parameter_tolerance = 1e-12;
  CancelCallback cancel(request.cancel);
  options.callbacks.push_back(&cancel);
  ceres::Solver::Summary summary;
  ceres::Solve(options, &problem, &summary);

  SolveResult result;
  result.cancelled = summary.termination_type == ceres::USER_FAILURE;
  result.initial_cost = summary.initial_cost;
  result.final_cost = summary.final_cost;
  return result;
}

}  // namespace lingbot::loop_detail
