// The seam between the pose graph's bookkeeping (pose_graph.cpp, no Ceres) and the nonlinear
// least-squares solve (ceres_solver.cpp with Ceres, no_solver.cpp without), so that Ceres'
// headers and definitions reach one source file only.
#pragma once

#include <atomic>
#include <vector>

#include "lingbot/loop.h"
#include "loop/edge_residual.h"

namespace lingbot::loop_detail {

struct SolverNode {
  double q[4];  // x y z w
  double t[3];
  double l;  // log scale
};

struct SolverEdge {
  int i = 0, j = 0;  // node positions
  EdgeMeasurement z;
  EdgeSigmas sigma;
  bool robust = false;  // the robust loss applies (loop edges)
};

struct SolveRequest {
  std::vector<SolverNode>* nodes = nullptr;  // start in, solution out; node 0 held fixed
  const std::vector<SolverEdge>* edges = nullptr;
  RobustLoss loss = RobustLoss::Cauchy;
  double loss_scale = 1;
  int max_iterations = 100;
  int threads = 1;
  const std::atomic<bool>* cancel = nullptr;
};

struct SolveResult {
  bool cancelled = false;
  double initial_cost = 0, final_cost = 0;  // with the robust loss, as Ceres reports them
};

bool solver_available();
SolveResult solve_graph(const SolveRequest& request);

}  // namespace lingbot::loop_detail
