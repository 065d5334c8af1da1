// The reports as JSON: what `eval --json` writes and the Python module returns as dicts.
#include <nlohmann/json.hpp>

#include "eval/option_names.h"
#include "lingbot/eval.h"

namespace lingbot::eval {
namespace {

nlohmann::ordered_json stats(const Stats& s) {
  return {{"rmse", s.rmse}, {"mean", s.mean}, {"median", s.median}, {"std", s.std},
          {"min", s.min},   {"max", s.max},   {"sse", s.sse},       {"count", s.count}};
}

}  // namespace

std::string to_json(const TrajectoryReport& r) {
  nlohmann::ordered_json j;
  j["estimate_poses"] = r.estimate_poses;
  j["reference_poses"] = r.reference_poses;
  j["matched"] = r.matched;
  j["alignment"] = name(r.alignment);
  j["scale"] = r.transform.scale;
  j["rotation"] = r.transform.rotation;
  j["translation"] = r.transform.translation;
  j["ate"] = stats(r.ate);
  j["rpe_translation"] = stats(r.rpe_translation);
  j["rpe_rotation_deg"] = stats(r.rpe_rotation_deg);
  j["delta"] = r.delta;
  j["delta_unit"] = name(r.delta_unit);
  j["all_pairs"] = r.all_pairs;
  return j.dump();
}

std::string to_json(const DepthReport& r) {
  nlohmann::ordered_json j{
      {"abs_rel", r.abs_rel},   {"sq_rel", r.sq_rel},         {"rmse", r.rmse},
      {"log_rmse", r.log_rmse}, {"delta1", r.delta1},         {"delta2", r.delta2},
      {"delta3", r.delta3},     {"scale", r.scale},           {"pixels", r.pixels},
      {"frames", r.frames},     {"scaling", name(r.scaling)}, {"per_frame", r.per_frame}};
  return j.dump();
}

std::string to_json(const PointCloudReport& r) {
  nlohmann::ordered_json j{{"accuracy", r.accuracy},
                           {"accuracy_median", r.accuracy_median},
                           {"completeness", r.completeness},
                           {"completeness_median", r.completeness_median},
                           {"chamfer", r.chamfer},
                           {"precision", r.precision},
                           {"recall", r.recall},
                           {"f1", r.f1},
                           {"threshold", r.threshold},
                           {"predicted_points", r.predicted_points},
                           {"reference_points", r.reference_points}};
  return j.dump();
}

}  // namespace lingbot::eval
