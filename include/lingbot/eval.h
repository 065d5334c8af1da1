// Public API: evaluation of a run against ground truth, as `lingbot-map eval` and
// `lingbot_map.eval` do it: trajectories (ATE, RPE), depth maps and point clouds.
//
//   using namespace lingbot::eval;
//   Trajectory est = read_trajectory("result/");                  // predictions.safetensors
//   Trajectory gt = read_trajectory("groundtruth.txt");           // TUM, by its extension
//   TrajectoryReport r = evaluate_trajectory(est, gt, {});        // Sim(3), RPE over 1 frame
//   std::printf("ATE %.4f m over %zu poses\n", r.ate.rmse, r.matched);
//
// Definitions (those of the TUM RGB-D benchmark and of the evo tool, whose numbers they give):
// - Association: estimate and reference poses are paired by timestamp the way the TUM tool
//   associate.py does: every pair closer than `max_time_diff` (strictly) is a candidate, the
//   candidates are taken in order of increasing difference (ties: earlier estimate, then earlier
//   reference), and each pose is used at most once. Frame-indexed inputs (KITTI files,
//   predictions.safetensors) have the frame index as their time.
// - Alignment: Umeyama's closed form (1991) over the matched camera centres, mapping the
//   estimate onto the reference: Sim(3) (with scale: for monocular estimates, whose scale is
//   arbitrary), SE(3) (without: the TUM benchmark's ATE), or none.
// - ATE: per matched pose e_i = |s R p_i + t - q_i| (p estimated centre, q reference centre),
//   reported as evo reports APE on the translation part: RMSE, mean, median, std (population),
//   min, max and SSE.
// - RPE: for pose pairs (i, j) of the aligned estimate P and the reference Q,
//   E = (Q_i^-1 Q_j)^-1 (P_i^-1 P_j); translation error |trans(E)|, rotation error the angle of
//   rot(E) in degrees. Pairs as evo makes them from the (aligned) estimate: `delta` frames apart,
//   consecutive (0, d), (d, 2d), ... or every (i, i + d) with `all_pairs`; or by travelled path
//   in metres (evo's --delta_unit m): the poses at which the path since the last one first
//   reaches `delta`, consecutive.
// - Depth: valid pixels have a finite reference depth > 0 (within [min_depth, max_depth] when
//   given) and a finite predicted depth > 0. The prediction is scaled by s: the ratio of the
//   medians (reference over prediction), the least-squares s = sum(p g) / sum(p p), or 1.
//   AbsRel = mean |s p - g| / g, SqRel = mean (s p - g)^2 / g, RMSE = sqrt(mean (s p - g)^2),
//   log RMSE = sqrt(mean (log s p - log g)^2), delta_k = fraction with max(s p / g, g / s p) <
//   1.25^k. One scale and one mean over all pixels of the sequence, or (per_frame) a scale and
//   the metrics per frame, then averaged over the frames (as single-image benchmarks do).
// - Point clouds: accuracy = mean distance from each predicted point to its nearest reference
//   point, completeness = mean distance from each reference point to its nearest predicted
//   point (medians too), chamfer = their mean; precision = fraction of predicted points within
//   `threshold` of the reference, recall = fraction of reference points within `threshold` of the
//   prediction, F1 = 2 P R / (P + R); as 3D reconstruction benchmarks report them.
//
// Bad input (a missing file, an unparsable or duplicate line, too few matches, maps or
// trajectories that disagree in size) throws lingbot::Error with one line naming the file and
// line. `available()` is false in a build without Eigen and nanoflann (libeigen3-dev,
// libnanoflann-dev): reading works there, the metrics then throw saying so.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace lingbot::eval {

// Whether this build has the metrics (Eigen and nanoflann were found when it was configured).
bool available();

// ---------------------------------------------------------------------------------------------
// Trajectories

// Camera-to-world poses, [R | t] row-major (t the camera centre), with a time each.
struct Trajectory {
  std::vector<double> stamps;
  std::vector<std::array<double, 12>> poses;
  bool indexed = false;  // the times are frame indices (KITTI, predictions.safetensors)
  std::string name;      // the file it came from, for messages
  size_t size() const { return poses.size(); }
};

enum class TrajectoryFormat { Auto, Tum, Kitti, Predictions };

// TUM: "timestamp tx ty tz qx qy qz qw" a line (quaternion normalised; '#' lines and blank
// lines skipped; commas accepted as separators). KITTI: the 12 numbers of [R | t] a line, the
// line's position as its time. `what` names the source in errors. Throws Error for a line with
// the wrong count of numbers, a number that does not parse or is not finite, a zero quaternion,
// a rotation that is not one (KITTI), a timestamp that appears twice, or no poses at all.
Trajectory parse_tum(std::string_view text, const std::string& what);
Trajectory parse_kitti(std::string_view text, const std::string& what);

// A file in either format, or a run's predictions.safetensors (the file or its folder): its
// `key` tensor ("c2w", or "c2w_optimized" where the run holds loop-closed poses), F32 [S, 3, 4],
// timed by frame index. Auto: predictions for a folder or .safetensors, KITTI for a file whose
// first pose line has 12 numbers, TUM for 8.
Trajectory read_trajectory(const std::string& path,
                           TrajectoryFormat format = TrajectoryFormat::Auto,
                           const std::string& key = "c2w");
// Whether a predictions file (or result folder) holds the tensor `key`.
bool predictions_have(const std::string& path, const std::string& key);

// Replaces the times of a trajectory with those of a file: the first number of each line that
// is not blank or a '#' comment (a TUM rgb.txt, a list of times), one per pose.
void set_stamps(Trajectory& t, const std::string& stamps_file);

// Index pairs (estimate, reference) as associate.py makes them (see the definitions above),
// sorted by estimate index. `offset` is added to the reference's times.
std::vector<std::pair<size_t, size_t>> associate(const std::vector<double>& estimate,
                                                 const std::vector<double>& reference,
                                                 double max_time_diff, double offset = 0);

// A similarity x -> scale * R x + t.
struct Similarity {
  double scale = 1;
  std::array<double, 9> rotation{1, 0, 0, 0, 1, 0, 0, 0, 1};  // row-major
  std::array<double, 3> translation{0, 0, 0};
};

// Umeyama's least-squares similarity (with_scale) or rigid motion taking `from` onto `to`
// (equal counts, at least 3 points for a similarity, 2 for a rigid motion; a degenerate set, all
// points on one spot, throws Error).
Similarity umeyama(const std::vector<std::array<double, 3>>& from,
                   const std::vector<std::array<double, 3>>& to, bool with_scale);

// The statistics evo prints for an error array.
struct Stats {
  double rmse = 0, mean = 0, median = 0, std = 0, min = 0, max = 0, sse = 0;
  size_t count = 0;
};
Stats statistics(const std::vector<double>& errors);

enum class Alignment { Sim3, SE3, None };
enum class DeltaUnit { Frames, Meters };

struct TrajectoryOptions {
  Alignment alignment = Alignment::Sim3;
  double max_time_diff = 0.02;  // seconds (associate.py's default); < 1 for frame indices
  double time_offset = 0;       // added to the reference's times
  double delta = 1;             // RPE: frames (a whole number >= 1) or metres (> 0)
  DeltaUnit delta_unit = DeltaUnit::Frames;
  bool all_pairs = false;
};

struct TrajectoryReport {
  size_t estimate_poses = 0, reference_poses = 0, matched = 0;
  Alignment alignment = Alignment::Sim3;
  Similarity transform;  // applied to the estimate
  Stats ate;             // in the reference's units
  Stats rpe_translation, rpe_rotation_deg;
  double delta = 1;
  DeltaUnit delta_unit = DeltaUnit::Frames;
  bool all_pairs = false;
  // The matched poses: indices into each trajectory, the aligned estimate's centres and the
  // reference's (for plots).
  std::vector<std::pair<size_t, size_t>> matches;
  std::vector<std::array<double, 3>> aligned, reference;
  std::vector<double> ate_errors;  // per match
};

// The options from the names the CLI's flags and Python's arguments use, in one place so that
// both translate them alike: align "sim3", "se3" or "none"; delta_unit "frames" or "m". An
// unknown name throws Error (InvalidArgument) listing the accepted ones.
TrajectoryOptions trajectory_options(const std::string& align, double max_time_diff,
                                     double time_offset, double delta,
                                     const std::string& delta_unit, bool all_pairs);
// "auto", "tum", "kitti" or "predictions"; as above.
TrajectoryFormat parse_trajectory_format(const std::string& name);

// Matches, aligns and measures. Throws Error (one line) for mismatched frame-indexed lengths,
// fewer matches than the alignment needs (3 for Sim(3), 2 otherwise; 2 without alignment), a
// delta that gives no RPE pair, or options out of range.
TrajectoryReport evaluate_trajectory(const Trajectory& estimate, const Trajectory& reference,
                                     const TrajectoryOptions& options);

// ---------------------------------------------------------------------------------------------
// Depth

struct DepthMaps {
  int64_t frames = 0, height = 0, width = 0;
  std::vector<float> values;  // frames * height * width, row-major
  std::string name;
};

// Depth maps from: a predictions.safetensors (or its folder): its `depth`; a .npy file (float32
// or float64, [H, W] or [S, H, W], or uint16 scaled like PNGs); a 16-bit greyscale PNG whose
// values are depth * png_scale (0 = no depth; the TUM and our `depth` export use 1000 or 5000);
// or a folder of such .png / .npy files taken in natural order.
DepthMaps read_depth(const std::string& path, double png_scale = 1000);

enum class DepthScaling { Median, LeastSquares, None };

struct DepthOptions {
  DepthScaling scaling = DepthScaling::Median;
  bool per_frame = false;
  double min_depth = 0, max_depth = 0;  // of the reference; 0 = no bound
};

struct DepthReport {
  double abs_rel = 0, sq_rel = 0, rmse = 0, log_rmse = 0, delta1 = 0, delta2 = 0, delta3 = 0;
  double scale = 1;  // the sequence's scale (per_frame: the mean of the frames')
  size_t pixels = 0;
  int64_t frames = 0;
  DepthScaling scaling = DepthScaling::Median;
  bool per_frame = false;
};

// The options from their names, as trajectory_options: scaling "median", "lsq" or "none".
DepthOptions depth_options(const std::string& scaling, bool per_frame, double min_depth,
                           double max_depth);

// Throws Error when the two disagree in frame count or map size, or no pixel is valid.
DepthReport evaluate_depth(const DepthMaps& predicted, const DepthMaps& reference,
                           const DepthOptions& options);

// ---------------------------------------------------------------------------------------------
// Point clouds

struct PointCloud {
  std::vector<double> xyz;  // 3 per point
  std::string name;
  size_t size() const { return xyz.size() / 3; }
};

// The vertices' x, y, z of a PLY file (ascii, binary_little_endian or binary_big_endian; any
// numeric property type; other properties and elements skipped).
PointCloud read_ply(const std::string& path);
PointCloud parse_ply(std::string_view bytes, const std::string& what);

// Applies a similarity to every point (to put a predicted cloud into the reference's frame with
// the trajectory's alignment).
void transform_points(PointCloud& cloud, const Similarity& s);

struct PointCloudReport {
  double accuracy = 0, accuracy_median = 0, completeness = 0, completeness_median = 0;
  double chamfer = 0, precision = 0, recall = 0, f1 = 0, threshold = 0;
  size_t predicted_points = 0, reference_points = 0;
};

// Nearest neighbours through k-d trees. Throws Error for an empty cloud or threshold <= 0.
PointCloudReport evaluate_point_cloud(const PointCloud& predicted, const PointCloud& reference,
                                      double threshold);

// ---------------------------------------------------------------------------------------------
// Reports

// One JSON object each, with the field names above (lower-case with underscores; statistics as
// {"rmse", "mean", "median", "std", "min", "max", "sse", "count"}); what `eval --json` writes and
// what the Python module returns as dicts.
std::string to_json(const TrajectoryReport& r);
std::string to_json(const DepthReport& r);
std::string to_json(const PointCloudReport& r);

// A top view of trajectories as an RGB PNG of width x height: the reference (grey, dashed) and
// each estimate already aligned to it (`estimates`: the colours below in order: blue, then
// orange), on the plane of the reference's two largest principal axes (the ground for a camera
// carried or driven around), equal scale on both axes, a dot at each start.
void plot_trajectories(const std::string& png_path,
                       const std::vector<std::array<double, 3>>& reference,
                       const std::vector<std::vector<std::array<double, 3>>>& estimates,
                       int width = 1024, int height = 768);

}  // namespace lingbot::eval
