// Mapping every frame to its optimized pose: a node's own correction, or its nearest node's.
#include <algorithm>

#include "lingbot/loop.h"

namespace lingbot {

const Sim3* PoseCorrections::of(int64_t node) const {
  const auto it = std::lower_bound(nodes.begin(), nodes.end(), node);
  return it != nodes.end() && *it == node ? &corrections[it - nodes.begin()] : nullptr;
}

Sim3 PoseCorrections::nearest(int64_t frame) const {
  if (nodes.empty()) return Sim3{};
  const auto it = std::lower_bound(nodes.begin(), nodes.end(), frame);
  if (it == nodes.end()) return corrections.back();
  if (it == nodes.begin()) return corrections.front();
  // Between two nodes: the nearer one, the earlier on a tie (the keyframe the stream attached
  // the frame to).
  const size_t after = it - nodes.begin();
  return *it - frame < frame - nodes[after - 1] ? corrections[after] : corrections[after - 1];
}

std::vector<Sim3> PoseCorrections::correct_all(
    const std::vector<std::array<float, 12>>& streamed_c2w) const {
  std::vector<Sim3> out;
  out.reserve(streamed_c2w.size());
  for (size_t i = 0; i < streamed_c2w.size(); ++i)
    out.push_back(correct(static_cast<int64_t>(i), Sim3::from_c2w(streamed_c2w[i].data())));
  return out;
}

}  // namespace lingbot
