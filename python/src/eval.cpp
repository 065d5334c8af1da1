// lingbot_map.eval's compiled half: the readers and metrics of lingbot/eval.h on numpy arrays.
// Reports come back as the JSON the CLI writes (lingbot_map/eval.py turns them into dicts), with
// the matched positions as arrays.
#include "lingbot/eval.h"

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstring>
#include <string>
#include <vector>

#include "bindings.h"

namespace lingbot::python {
namespace {

namespace ev = lingbot::eval;
using Points = std::vector<std::array<double, 3>>;

py::array_t<double> points_array(const Points& p) {
  py::array_t<double> out({static_cast<py::ssize_t>(p.size()), py::ssize_t{3}});
  if (!p.empty()) std::memcpy(out.mutable_data(), p.data(), p.size() * sizeof(p[0]));
  return out;
}

Points points_of(const py::handle& a, const char* what) {
  auto x = py::array_t<double, py::array::c_style | py::array::forcecast>::ensure(a);
  if (!x || x.ndim() != 2 || x.shape(1) != 3)
    throw py::value_error(std::string(what) + " must be [N, 3]");
  Points p(static_cast<size_t>(x.shape(0)));
  if (!p.empty()) std::memcpy(p.data(), x.data(), p.size() * sizeof(p[0]));
  return p;
}

// Poses [N, 3, 4] or [N, 4, 4] (camera to world) with times [N].
ev::Trajectory trajectory_of(const py::handle& stamps, const py::handle& poses, bool indexed,
                             const char* what) {
  auto t = py::array_t<double, py::array::c_style | py::array::forcecast>::ensure(stamps);
  auto p = py::array_t<double, py::array::c_style | py::array::forcecast>::ensure(poses);
  if (!p || p.ndim() != 3 || p.shape(2) != 4 || (p.shape(1) != 3 && p.shape(1) != 4))
    throw py::value_error(std::string(what) + ": poses must be [N, 3, 4] or [N, 4, 4]");
  if (!t || t.ndim() != 1 || t.shape(0) != p.shape(0))
    throw py::value_error(std::string(what) + ": one time per pose is needed");
  ev::Trajectory out;
  out.name = what;
  out.indexed = indexed;
  const auto n = static_cast<size_t>(p.shape(0));
  const size_t stride = static_cast<size_t>(p.shape(1)) * 4;
  for (size_t i = 0; i < n; ++i) {
    std::array<double, 12> pose;
    std::memcpy(pose.data(), p.data() + i * stride, sizeof pose);
    out.poses.push_back(pose);
    out.stamps.push_back(t.data()[i]);
  }
  return out;
}

ev::DepthMaps depth_of(const py::handle& a, const char* what) {
  auto x = py::array_t<float, py::array::c_style | py::array::forcecast>::ensure(a);
  if (!x || (x.ndim() != 2 && x.ndim() != 3))
    throw py::value_error(std::string(what) + " must be [H, W] or [S, H, W]");
  ev::DepthMaps d;
  d.name = what;
  d.frames = x.ndim() == 3 ? x.shape(0) : 1;
  d.height = x.shape(x.ndim() - 2);
  d.width = x.shape(x.ndim() - 1);
  d.values.assign(x.data(), x.data() + x.size());
  return d;
}

}  // namespace

void bind_eval(py::module_& m) {
  m.def("_eval_available", &ev::available);
  m.def(
      "_eval_read_trajectory",
      [](const py::object& path, const std::string& format, const std::string& key,
         const py::object& times) {
        ev::Trajectory t = ev::read_trajectory(path_arg(path, "read_trajectory: path"),
                                               ev::parse_trajectory_format(format), key);
        if (!times.is_none()) ev::set_stamps(t, path_arg(times, "read_trajectory: times"));
        py::array_t<double> stamps(static_cast<py::ssize_t>(t.size()));
        py::array_t<double> poses(
            {static_cast<py::ssize_t>(t.size()), py::ssize_t{3}, py::ssize_t{4}});
        std::memcpy(stamps.mutable_data(), t.stamps.data(), t.size() * sizeof(double));
        std::memcpy(poses.mutable_data(), t.poses.data(), t.size() * sizeof(t.poses[0]));
        return py::make_tuple(stamps, poses, t.indexed);
      },
      py::arg("path"), py::arg("format") = "auto", py::arg("key") = "c2w",
      py::arg("times") = py::none());
  m.def("_eval_trajectory", [](const py::handle& est_stamps, const py::handle& est_poses,
                               bool est_indexed, const py::handle& ref_stamps,
                               const py::handle& ref_poses, bool ref_indexed,
                               const std::string& align, double max_time_diff, double time_offset,
                               double delta, const std::string& delta_unit, bool all_pairs) {
    const ev::TrajectoryOptions o =
        ev::trajectory_options(align, max_time_diff, time_offset, delta, delta_unit, all_pairs);
    const ev::Trajectory est = trajectory_of(est_stamps, est_poses, est_indexed, "estimate");
    const ev::Trajectory ref = trajectory_of(ref_stamps, ref_poses, ref_indexed, "reference");
    const ev::TrajectoryReport r = ev::evaluate_trajectory(est, ref, o);
    py::array_t<int64_t> matches({static_cast<py::ssize_t>(r.matched), py::ssize_t{2}});
    for (size_t k = 0; k < r.matched; ++k) {
      matches.mutable_data()[2 * k] = static_cast<int64_t>(r.matches[k].first);
      matches.mutable_data()[2 * k + 1] = static_cast<int64_t>(r.matches[k].second);
    }
    py::array_t<double> errors(static_cast<py::ssize_t>(r.ate_errors.size()));
    if (!r.ate_errors.empty())
      std::memcpy(errors.mutable_data(), r.ate_errors.data(), r.ate_errors.size() * 8);
    return py::make_tuple(ev::to_json(r), points_array(r.aligned), points_array(r.reference),
                          matches, errors);
  });
  m.def("_eval_umeyama", [](const py::handle& x, const py::handle& y, bool with_scale) {
    const ev::Similarity s = ev::umeyama(points_of(x, "x"), points_of(y, "y"), with_scale);
    py::array_t<double> r({py::ssize_t{3}, py::ssize_t{3}}), t(py::ssize_t{3});
    std::memcpy(r.mutable_data(), s.rotation.data(), sizeof s.rotation);
    std::memcpy(t.mutable_data(), s.translation.data(), sizeof s.translation);
    return py::make_tuple(s.scale, r, t);
  });
  m.def("_eval_read_depth", [](const py::object& path, double png_scale) {
    const ev::DepthMaps d = ev::read_depth(path_arg(path, "read_depth: path"), png_scale);
    return to_array(d.values.data(), {d.frames, d.height, d.width});
  });
  m.def("_eval_depth", [](const py::handle& pred, const py::handle& gt, const std::string& scaling,
                          bool per_frame, double min_depth, double max_depth) {
    const ev::DepthOptions o = ev::depth_options(scaling, per_frame, min_depth, max_depth);
    const ev::DepthMaps p = depth_of(pred, "predicted"), g = depth_of(gt, "reference");
    py::gil_scoped_release release;
    return ev::to_json(ev::evaluate_depth(p, g, o));
  });
  m.def("_eval_read_ply", [](const py::object& path) {
    const ev::PointCloud c = ev::read_ply(path_arg(path, "read_ply: path"));
    py::array_t<double> out({static_cast<py::ssize_t>(c.size()), py::ssize_t{3}});
    std::memcpy(out.mutable_data(), c.xyz.data(), c.xyz.size() * sizeof(double));
    return out;
  });
  m.def("_eval_point_cloud", [](const py::handle& pred, const py::handle& ref, double threshold) {
    ev::PointCloud p, r;
    p.name = "predicted";
    r.name = "reference";
    for (const auto& q : points_of(pred, "predicted"))
      p.xyz.insert(p.xyz.end(), q.begin(), q.end());
    for (const auto& q : points_of(ref, "reference")) r.xyz.insert(r.xyz.end(), q.begin(), q.end());
    py::gil_scoped_release release;
    return ev::to_json(ev::evaluate_point_cloud(p, r, threshold));
  });
}

}  // namespace lingbot::python
