// `lingbot-map eval`: a run (or any trajectory, depth maps, point cloud) against ground truth:
// ATE and RPE, depth metrics, point-cloud accuracy / completeness / F1; a table, JSON and a plot.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "commands.h"
#include "lingbot/error.h"
#include "lingbot/eval.h"
#include "lingbot/render.h"

namespace lingbot::cli {
namespace {

namespace fs = std::filesystem;
using namespace lingbot::eval;

struct EvalArgs {
  std::string estimate, gt, est_format = "auto", gt_format = "auto", est_times;
  std::string align = "sim3", delta_unit = "frames";
  double max_time_diff = 0.02, time_offset = 0, delta = 1;
  bool all_pairs = false;
  std::string depth, depth_gt, depth_scaling = "median";
  bool depth_per_frame = false;
  double png_scale = 1000, min_depth = 0, max_depth = 0;
  std::string points, points_gt;
  double threshold = 0.05;
  bool no_points_align = false;
  std::string json, plot, plot_size = "1024x768";
};

bool is_run(const std::string& path) {
  std::error_code ec;
  return fs::is_directory(path, ec) || fs::path(path).extension() == ".safetensors";
}

void print_trajectory(const char* title, const TrajectoryReport& r) {
  std::printf("%s: %zu of %zu poses matched (reference %zu), ", title, r.matched, r.estimate_poses,
              r.reference_poses);
  if (r.alignment == Alignment::Sim3)
    std::printf("Sim(3) alignment, scale %.6g\n", r.transform.scale);
  else
    std::printf("%s\n", r.alignment == Alignment::SE3 ? "SE(3) alignment" : "not aligned");
  std::printf("  %-14s %10s %10s %10s %10s %10s %10s\n", "", "rmse", "mean", "median", "std", "min",
              "max");
  const auto row = [](const char* name, const Stats& s) {
    std::printf("  %-14s %10.6g %10.6g %10.6g %10.6g %10.6g %10.6g\n", name, s.rmse, s.mean,
                s.median, s.std, s.min, s.max);
  };
  row("ATE", r.ate);
  row("RPE trans", r.rpe_translation);
  row("RPE rot (deg)", r.rpe_rotation_deg);
  std::printf("  RPE over %g %s, %s pairs (%zu)\n", r.delta,
              r.delta_unit == DeltaUnit::Frames ? (r.delta == 1 ? "frame" : "frames") : "m",
              r.all_pairs ? "all" : "consecutive", r.rpe_translation.count);
}

int run_eval(const EvalArgs& a) {
  LINGBOT_CHECK_ARG(!a.gt.empty() || !a.depth_gt.empty() || !a.points_gt.empty(),
                    "eval needs ground truth: --gt (trajectory), --depth-gt or --points-gt");
  const bool table = a.json != "-";
  nlohmann::ordered_json out = nlohmann::ordered_json::object();
  std::optional<TrajectoryReport> streamed, optimized;

  if (!a.gt.empty()) {
    LINGBOT_CHECK_ARG(!a.estimate.empty(), "--gt needs the estimate (the run's folder or a file)");
    const TrajectoryOptions o = trajectory_options(a.align, a.max_time_diff, a.time_offset, a.delta,
                                                   a.delta_unit, a.all_pairs);
    const Trajectory ref = read_trajectory(a.gt, parse_trajectory_format(a.gt_format));
    const auto evaluate = [&](const std::string& key) {
      Trajectory est = read_trajectory(a.estimate, parse_trajectory_format(a.est_format), key);
      if (!a.est_times.empty()) set_stamps(est, a.est_times);
      return evaluate_trajectory(est, ref, o);
    };
    streamed = evaluate("c2w");
    // Runs with loop closure hold the optimized poses beside the streamed ones: both are
    // measured, so that what the loop closure gained shows.
    const bool has_optimized = a.est_format != "tum" && a.est_format != "kitti" &&
                               is_run(a.estimate) && predictions_have(a.estimate, "c2w_optimized");
    if (has_optimized) optimized = evaluate("c2w_optimized");
    out["trajectory"] = nlohmann::ordered_json::parse(to_json(*streamed));
    if (optimized) out["trajectory_optimized"] = nlohmann::ordered_json::parse(to_json(*optimized));
    if (table) {
      std::printf("trajectory: %s against %s\n", a.estimate.c_str(), a.gt.c_str());
      print_trajectory(optimized ? "streamed poses (c2w)" : "poses", *streamed);
      if (optimized) print_trajectory("optimized poses (c2w_optimized)", *optimized);
    }
  }

  if (!a.depth_gt.empty()) {
    std::string pred = a.depth;
    if (pred.empty()) {
      LINGBOT_CHECK_ARG(!a.estimate.empty() && is_run(a.estimate),
                        "--depth-gt needs the predicted depth: --depth, or a run as the estimate");
      pred = a.estimate;
    }
    const DepthOptions o =
        depth_options(a.depth_scaling, a.depth_per_frame, a.min_depth, a.max_depth);
    // Predicted maps in PNG units are rare; they take the same scale as the reference's.
    const DepthReport r =
        evaluate_depth(read_depth(pred, a.png_scale), read_depth(a.depth_gt, a.png_scale), o);
    out["depth"] = nlohmann::ordered_json::parse(to_json(r));
    if (table) {
      std::printf("depth: %s against %s: %lld frames, %zu pixels, %s scale %.6g%s\n", pred.c_str(),
                  a.depth_gt.c_str(), static_cast<long long>(r.frames), r.pixels,
                  a.depth_scaling.c_str(), r.scale,
                  r.per_frame ? " (mean of the frames')" : " (one for the sequence)");
      std::printf("  %10s %10s %10s %10s %10s %10s %10s\n", "abs_rel", "sq_rel", "rmse", "log_rmse",
                  "d<1.25", "d<1.25^2", "d<1.25^3");
      std::printf("  %10.6g %10.6g %10.6g %10.6g %10.6g %10.6g %10.6g\n", r.abs_rel, r.sq_rel,
                  r.rmse, r.log_rmse, r.delta1, r.delta2, r.delta3);
    }
  }

  if (!a.points_gt.empty()) {
    std::string pred = a.points;
    if (pred.empty()) {
      LINGBOT_CHECK_ARG(
          !a.estimate.empty() && is_run(a.estimate),
          "--points-gt needs the predicted cloud: --points, or a run as the estimate");
      std::error_code ec;
      pred = fs::is_directory(a.estimate, ec)
                 ? (fs::path(a.estimate) / "points.ply").string()
                 : (fs::path(a.estimate).parent_path() / "points.ply").string();
    }
    PointCloud cloud = read_ply(pred);
    const PointCloud ref = read_ply(a.points_gt);
    // The cloud is in the run's frame; the trajectory's alignment takes it into the reference's
    // (the optimized poses' where the run has them: the exports are rewritten with those).
    const TrajectoryReport* t = optimized ? &*optimized : streamed ? &*streamed : nullptr;
    const bool aligned = t && !a.no_points_align && t->alignment != Alignment::None;
    if (aligned) transform_points(cloud, t->transform);
    const PointCloudReport r = evaluate_point_cloud(cloud, ref, a.threshold);
    out["point_cloud"] = nlohmann::ordered_json::parse(to_json(r));
    out["point_cloud"]["aligned_by_trajectory"] = aligned;
    if (table) {
      std::printf("point cloud: %s against %s: %zu and %zu points, %s, threshold %g\n",
                  pred.c_str(), a.points_gt.c_str(), r.predicted_points, r.reference_points,
                  aligned ? "aligned by the trajectory's transform" : "as they are", r.threshold);
      std::printf("  %10s %10s %10s %10s %10s %10s\n", "accuracy", "complete", "chamfer",
                  "precision", "recall", "F1");
      std::printf("  %10.6g %10.6g %10.6g %9.2f%% %9.2f%% %9.2f%%\n", r.accuracy, r.completeness,
                  r.chamfer, 100 * r.precision, 100 * r.recall, 100 * r.f1);
      std::printf("  medians: accuracy %.6g, completeness %.6g\n", r.accuracy_median,
                  r.completeness_median);
    }
  }

  if (!a.plot.empty()) {
    LINGBOT_CHECK_ARG(streamed.has_value(), "--plot draws the trajectory: it needs --gt");
    const auto [w, h] = parse_render_size(a.plot_size);
    std::vector<std::vector<std::array<double, 3>>> est{streamed->aligned};
    if (optimized) est.push_back(optimized->aligned);
    plot_trajectories(a.plot, streamed->reference, est, w, h);
    if (table)
      std::printf("plot: %s (top view; grey dashed: ground truth, blue: %s%s)\n", a.plot.c_str(),
                  optimized ? "streamed" : "estimate", optimized ? ", orange: optimized" : "");
  }

  if (!a.json.empty()) {
    const std::string text = out.dump(2) + "\n";
    if (a.json == "-") {
      std::fputs(text.c_str(), stdout);
    } else {
      std::ofstream f(a.json);
      f << text;
      f.close();
      if (!f) throw Error("cannot write " + a.json);
    }
  }
  return 0;
}

}  // namespace

void add_eval(CLI::App& app) {
  auto a = std::make_shared<EvalArgs>();
  CLI::App* sub = app.add_subcommand(
      "eval",
      "Measure a run against ground truth: ATE/RPE (as the TUM benchmark and evo), depth and "
      "point-cloud metrics");
  sub->add_option("estimate", a->estimate,
                  "the run's folder or predictions.safetensors, or a TUM / KITTI trajectory file");
  sub->add_option("--gt", a->gt, "ground-truth trajectory (TUM, KITTI or predictions)");
  sub->add_option("--est-format", a->est_format, "format of the estimate")
      ->capture_default_str()
      ->check(CLI::IsMember({"auto", "tum", "kitti", "predictions"}));
  sub->add_option("--gt-format", a->gt_format, "format of the ground truth")
      ->capture_default_str()
      ->check(CLI::IsMember({"auto", "tum", "kitti", "predictions"}));
  sub->add_option("--est-times", a->est_times,
                  "times of the estimate's frames, one a line (first field; a TUM rgb.txt works); "
                  "frame-indexed estimates are otherwise timed 0, 1, 2, ...");
  sub->add_option("--align", a->align,
                  "sim3 (with scale, for monocular runs), se3 (the TUM benchmark's ATE) or none")
      ->capture_default_str()
      ->check(CLI::IsMember({"sim3", "se3", "none"}));
  sub->add_option("--max-time-diff", a->max_time_diff,
                  "largest time difference of a matched pair, in seconds (as associate.py)")
      ->capture_default_str();
  sub->add_option("--time-offset", a->time_offset, "added to the ground truth's times")
      ->capture_default_str();
  sub->add_option("--delta", a->delta, "RPE: distance of the pose pairs")->capture_default_str();
  sub->add_option("--delta-unit", a->delta_unit, "RPE: frames, or m of travelled path")
      ->capture_default_str()
      ->check(CLI::IsMember({"frames", "m"}));
  sub->add_flag("--all-pairs", a->all_pairs,
                "RPE: every pair delta apart, not consecutive ones (evo's --all_pairs)");
  sub->add_option("--depth-gt", a->depth_gt,
                  "ground-truth depth: 16-bit PNG(s), .npy, or a folder of them");
  sub->add_option("--depth", a->depth, "predicted depth (default: the estimate's run)");
  sub->add_option("--depth-scaling", a->depth_scaling,
                  "median (ratio of medians), lsq (least squares) or none")
      ->capture_default_str()
      ->check(CLI::IsMember({"median", "lsq", "none"}));
  sub->add_flag("--depth-per-frame", a->depth_per_frame,
                "a scale and the metrics per frame, averaged (default: one for the sequence)");
  sub->add_option("--depth-png-scale", a->png_scale,
                  "16-bit PNG value per metre (1000: ours and most; 5000: TUM RGB-D)")
      ->capture_default_str();
  sub->add_option("--min-depth", a->min_depth, "ground-truth depths below are left out (0: none)");
  sub->add_option("--max-depth", a->max_depth, "ground-truth depths above are left out (0: none)");
  sub->add_option("--points-gt", a->points_gt, "ground-truth point cloud (PLY)");
  sub->add_option("--points", a->points, "predicted point cloud (default: the run's points.ply)");
  sub->add_option("--threshold", a->threshold,
                  "point clouds: distance for precision, recall and F1")
      ->capture_default_str();
  sub->add_flag("--no-points-align", a->no_points_align,
                "leave the predicted cloud as it is (default: the trajectory's alignment)");
  sub->add_option("--json", a->json, "write the results as JSON to FILE ('-': stdout, no table)");
  sub->add_option("--plot", a->plot, "PNG of the trajectories from above, aligned");
  sub->add_option("--plot-size", a->plot_size, "plot size WxH")->capture_default_str();
  commands().push_back({sub, [a] { return run_eval(*a); }});
}

}  // namespace lingbot::cli
