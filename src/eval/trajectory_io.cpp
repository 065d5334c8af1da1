// Trajectory files in (TUM, KITTI, a run's predictions.safetensors) and the association of two
// trajectories by time. No dependency beyond the standard library and the safetensors reader, so
// that the parsers build into the fuzz targets on their own.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <utility>

#include "eval/text_lines.h"
#include "lingbot/error.h"
#include "lingbot/eval.h"
#include "weights/safetensors.h"

namespace lingbot::eval {
namespace {

namespace fs = std::filesystem;

std::string line_ref(const std::string& what, size_t line) {
  return what + ":" + std::to_string(line);
}

// Two poses at one time make the association ambiguous (which one is the ground truth?), so a
// repeated timestamp is an error rather than something to pick from.
void check_unique_stamps(const Trajectory& t, const std::vector<size_t>& lines) {
  std::vector<size_t> order(t.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return t.stamps[a] < t.stamps[b] || (t.stamps[a] == t.stamps[b] && a < b);
  });
  for (size_t k = 1; k < order.size(); ++k)
    if (t.stamps[order[k]] == t.stamps[order[k - 1]]) {
      std::ostringstream s;
      s.precision(17);
      s << t.stamps[order[k]];
      throw Error(line_ref(t.name, lines[order[k]]) + ": timestamp " + s.str() +
                      " appears twice (also on line " + std::to_string(lines[order[k - 1]]) + ")",
                  ErrorKind::InvalidArgument);
    }
}

// R(q) for a unit quaternion (x, y, z, w), row-major.
std::array<double, 9> quaternion_matrix(double x, double y, double z, double w) {
  return {1 - 2 * (y * y + z * z), 2 * (x * y - z * w),     2 * (x * z + y * w),
          2 * (x * y + z * w),     1 - 2 * (x * x + z * z), 2 * (y * z - x * w),
          2 * (x * z - y * w),     2 * (y * z + x * w),     1 - 2 * (x * x + y * y)};
}

// A rotation within the precision a text file holds (6 significant digits at worst).
bool is_rotation(const std::array<double, 12>& p) {
  for (int a = 0; a < 3; ++a)
    for (int b = 0; b < 3; ++b) {
      double dot = 0;
      for (int k = 0; k < 3; ++k) dot += p[4 * k + a] * p[4 * k + b];
      if (std::fabs(dot - (a == b ? 1.0 : 0.0)) > 1e-2) return false;
    }
  const double det = p[0] * (p[5] * p[10] - p[6] * p[9]) - p[1] * (p[4] * p[10] - p[6] * p[8]) +
                     p[2] * (p[4] * p[9] - p[5] * p[8]);
  return det > 0;
}

std::string read_text(const std::string& path, const char* what) {
  std::error_code ec;
  if (!fs::exists(path, ec))
    throw Error(std::string("no ") + what + " file: " + path, ErrorKind::NotFound);
  if (fs::is_directory(path, ec)) throw Error(path + " is a folder, not a " + what + " file");
  std::ifstream f(path, std::ios::binary);
  if (!f) throw Error("cannot read " + path);
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

std::string predictions_file(const std::string& path) {
  std::error_code ec;
  return fs::is_directory(path, ec) ? (fs::path(path) / "predictions.safetensors").string() : path;
}

bool is_predictions_path(const std::string& path) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) return true;
  const std::string ext = fs::path(path).extension().string();
  return ext == ".safetensors";
}

Trajectory read_predictions(const std::string& path, const std::string& key) {
  const std::string file = predictions_file(path);
  if (!fs::exists(file)) throw Error("no predictions file: " + file, ErrorKind::NotFound);
  const SafetensorsFile f = read_safetensors(file);
  auto it = f.tensors.find(key);
  LINGBOT_CHECK(it != f.tensors.end(), file + " has no " + key + " tensor");
  const Tensor& c2w = it->second;
  LINGBOT_CHECK(c2w.dtype() == DType::F32 && c2w.rank() == 3 && c2w.dim(1) == 3 && c2w.dim(2) == 4,
                file + ": " + key + " is " + shape_str(c2w.shape()) + " " +
                    dtype_name(c2w.dtype()) + ", expected [S, 3, 4] F32");
  Trajectory t;
  t.name = file + (key == "c2w" ? "" : " (" + key + ")");
  t.indexed = true;
  const float* p = c2w.data<float>();
  for (int64_t i = 0; i < c2w.dim(0); ++i) {
    std::array<double, 12> pose;
    for (int k = 0; k < 12; ++k) {
      pose[k] = p[i * 12 + k];
      LINGBOT_CHECK(std::isfinite(pose[k]),
                    file + ": " + key + " of frame " + std::to_string(i) + " is not finite");
    }
    t.stamps.push_back(static_cast<double>(i));
    t.poses.push_back(pose);
  }
  LINGBOT_CHECK(!t.poses.empty(), file + ": " + key + " holds no poses");
  return t;
}

}  // namespace

Trajectory parse_tum(std::string_view text, const std::string& what) {
  Trajectory t;
  t.name = what;
  std::vector<size_t> lines;
  for_each_line(text, what, [&](size_t line, const std::vector<double>& v) {
    if (v.size() != 8)
      throw Error(line_ref(what, line) + ": " + std::to_string(v.size()) +
                      " numbers; a TUM line has 8: timestamp tx ty tz qx qy qz qw",
                  ErrorKind::InvalidArgument);
    const double n = std::sqrt(v[4] * v[4] + v[5] * v[5] + v[6] * v[6] + v[7] * v[7]);
    if (!(n > 1e-6))
      throw Error(line_ref(what, line) + ": the quaternion is zero", ErrorKind::InvalidArgument);
    const auto r = quaternion_matrix(v[4] / n, v[5] / n, v[6] / n, v[7] / n);
    t.stamps.push_back(v[0]);
    t.poses.push_back({r[0], r[1], r[2], v[1], r[3], r[4], r[5], v[2], r[6], r[7], r[8], v[3]});
    lines.push_back(line);
  });
  if (t.poses.empty()) throw Error(what + " holds no poses", ErrorKind::InvalidArgument);
  check_unique_stamps(t, lines);
  return t;
}

Trajectory parse_kitti(std::string_view text, const std::string& what) {
  Trajectory t;
  t.name = what;
  t.indexed = true;
  for_each_line(text, what, [&](size_t line, const std::vector<double>& v) {
    if (v.size() != 12)
      throw Error(line_ref(what, line) + ": " + std::to_string(v.size()) +
                      " numbers; a KITTI line has 12: the rows of [R | t]",
                  ErrorKind::InvalidArgument);
    std::array<double, 12> p;
    std::copy(v.begin(), v.end(), p.begin());
    if (!is_rotation(p))
      throw Error(line_ref(what, line) + ": the first 3 columns are not a rotation",
                  ErrorKind::InvalidArgument);
    t.stamps.push_back(static_cast<double>(t.poses.size()));
    t.poses.push_back(p);
  });
  if (t.poses.empty()) throw Error(what + " holds no poses", ErrorKind::InvalidArgument);
  return t;
}

Trajectory read_trajectory(const std::string& path, TrajectoryFormat format,
                           const std::string& key) {
  if (format == TrajectoryFormat::Predictions ||
      (format == TrajectoryFormat::Auto && is_predictions_path(path)))
    return read_predictions(path, key);
  const std::string text = read_text(path, "trajectory");
  // The first line with numbers decides; a line of neither count is reported by the TUM parser
  // (the format with timestamps, which most tools write).
  if (format == TrajectoryFormat::Auto)
    format = first_line_fields(text) == 12 ? TrajectoryFormat::Kitti : TrajectoryFormat::Tum;
  return format == TrajectoryFormat::Kitti ? parse_kitti(text, path) : parse_tum(text, path);
}

bool predictions_have(const std::string& path, const std::string& key) {
  const std::string file = predictions_file(path);
  if (!is_predictions_path(path) || !fs::exists(file)) return false;
  return read_safetensors(file).tensors.count(key) > 0;
}

void set_stamps(Trajectory& t, const std::string& stamps_file) {
  const std::string text = read_text(stamps_file, "timestamps");
  std::vector<double> stamps;
  std::vector<size_t> lines;
  for_each_line(
      text, stamps_file,
      [&](size_t line, const std::vector<double>& v) {
        stamps.push_back(v.at(0));
        lines.push_back(line);
      },
      /*first_only=*/true);
  if (stamps.size() != t.size())
    throw Error(stamps_file + " has " + std::to_string(stamps.size()) + " timestamps, " + t.name +
                    " " + std::to_string(t.size()) + " poses: one each is needed",
                ErrorKind::InvalidArgument);
  Trajectory timed = t;
  timed.stamps = stamps;
  timed.indexed = false;
  timed.name = stamps_file;
  check_unique_stamps(timed, lines);
  t.stamps = std::move(stamps);
  t.indexed = false;
}

std::vector<std::pair<size_t, size_t>> associate(const std::vector<double>& estimate,
                                                 const std::vector<double>& reference,
                                                 double max_time_diff, double offset) {
  // associate.py compares every pair; only pairs within max_time_diff can match, so the
  // reference is sorted and each estimate time looks at its window alone. The candidates are
  // then ranked exactly as associate.py ranks its tuples (difference, estimate time, reference
  // time), which is what makes the greedy choice the same.
  std::vector<size_t> ref_order(reference.size());
  for (size_t i = 0; i < ref_order.size(); ++i) ref_order[i] = i;
  std::sort(ref_order.begin(), ref_order.end(),
            [&](size_t a, size_t b) { return reference[a] < reference[b]; });
  std::vector<double> ref_sorted(ref_order.size());
  for (size_t k = 0; k < ref_order.size(); ++k) ref_sorted[k] = reference[ref_order[k]] + offset;
  struct Candidate {
    double diff;
    size_t est, ref;
  };
  std::vector<Candidate> candidates;
  for (size_t e = 0; e < estimate.size(); ++e) {
    const double a = estimate[e];
    auto k = static_cast<size_t>(
        std::lower_bound(ref_sorted.begin(), ref_sorted.end(), a - max_time_diff) -
        ref_sorted.begin());
    for (; k < ref_sorted.size() && ref_sorted[k] <= a + max_time_diff; ++k) {
      const double d = std::fabs(a - ref_sorted[k]);
      if (d < max_time_diff) candidates.push_back({d, e, ref_order[k]});
    }
  }
  std::sort(candidates.begin(), candidates.end(), [&](const Candidate& x, const Candidate& y) {
    if (x.diff != y.diff) return x.diff < y.diff;
    if (estimate[x.est] != estimate[y.est]) return estimate[x.est] < estimate[y.est];
    return reference[x.ref] < reference[y.ref];
  });
  std::vector<char> est_used(estimate.size(), 0), ref_used(reference.size(), 0);
  std::vector<std::pair<size_t, size_t>> matches;
  for (const Candidate& c : candidates) {
    if (est_used[c.est] || ref_used[c.ref]) continue;
    est_used[c.est] = ref_used[c.ref] = 1;
    matches.emplace_back(c.est, c.ref);
  }
  std::sort(matches.begin(), matches.end());
  return matches;
}

}  // namespace lingbot::eval
