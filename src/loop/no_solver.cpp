// Built instead of ceres_solver.cpp when Ceres is missing: the graph's bookkeeping works, solving
// says why it cannot.
#include "lingbot/error.h"
#include "loop/graph_solver.h"

namespace lingbot::loop_detail {

bool solver_available() {
  return false;
}

SolveResult solve_graph(const SolveRequest&) {
  throw Error(
      "loop closure is not available: this build has no Ceres (install libceres-dev and "
      "rebuild)");
}

}  // namespace lingbot::loop_detail
