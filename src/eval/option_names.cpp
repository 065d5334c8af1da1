// The options' names as the CLI, the Python module and the JSON reports spell them, in one table
// per option, so that the front ends translate them alike and the reports say them back.
#include "eval/option_names.h"

#include <array>
#include <utility>

#include "lingbot/error.h"

namespace lingbot::eval {
namespace {

template <typename E, size_t N>
using Names = std::array<std::pair<E, const char*>, N>;

constexpr Names<Alignment, 3> kAlignments{
    {{Alignment::Sim3, "sim3"}, {Alignment::SE3, "se3"}, {Alignment::None, "none"}}};
constexpr Names<DeltaUnit, 2> kDeltaUnits{
    {{DeltaUnit::Frames, "frames"}, {DeltaUnit::Meters, "m"}}};
constexpr Names<DepthScaling, 3> kScalings{{{DepthScaling::Median, "median"},
                                            {DepthScaling::LeastSquares, "lsq"},
                                            {DepthScaling::None, "none"}}};
constexpr Names<TrajectoryFormat, 4> kFormats{{{TrajectoryFormat::Auto, "auto"},
                                               {TrajectoryFormat::Tum, "tum"},
                                               {TrajectoryFormat::Kitti, "kitti"},
                                               {TrajectoryFormat::Predictions, "predictions"}}};

template <typename E, size_t N>
const char* name_in(const Names<E, N>& names, E value) {
  for (const auto& [v, n] : names)
    if (v == value) return n;
  return "?";
}

// "<what> must be 'a', 'b' or 'c', got 'x'".
template <typename E, size_t N>
E parse_in(const Names<E, N>& names, const std::string& name, const char* what) {
  std::string accepted;
  for (size_t i = 0; i < N; ++i) {
    if (names[i].second == name) return names[i].first;
    accepted += (i == 0 ? "'" : i + 1 == N ? " or '" : ", '") + std::string(names[i].second) + "'";
  }
  throw Error(std::string(what) + " must be " + accepted + ", got '" + name + "'",
              ErrorKind::InvalidArgument);
}

}  // namespace

const char* name(Alignment a) {
  return name_in(kAlignments, a);
}
const char* name(DeltaUnit u) {
  return name_in(kDeltaUnits, u);
}
const char* name(DepthScaling s) {
  return name_in(kScalings, s);
}

TrajectoryFormat parse_trajectory_format(const std::string& name) {
  return parse_in(kFormats, name, "the trajectory format");
}

TrajectoryOptions trajectory_options(const std::string& align, double max_time_diff,
                                     double time_offset, double delta,
                                     const std::string& delta_unit, bool all_pairs) {
  TrajectoryOptions o;
  o.alignment = parse_in(kAlignments, align, "align");
  o.max_time_diff = max_time_diff;
  o.time_offset = time_offset;
  o.delta = delta;
  o.delta_unit = parse_in(kDeltaUnits, delta_unit, "delta_unit");
  o.all_pairs = all_pairs;
  return o;
}

DepthOptions depth_options(const std::string& scaling, bool per_frame, double min_depth,
                           double max_depth) {
  DepthOptions o;
  o.scaling = parse_in(kScalings, scaling, "scaling");
  o.per_frame = per_frame;
  o.min_depth = min_depth;
  o.max_depth = max_depth;
  return o;
}

}  // namespace lingbot::eval
