// A run's loop closure: detector, loop edges, pose graph, and the outputs of the optimized poses.
#include "run/loop_closing.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <string>

#include "io/sinks/sink_util.h"
#include "lingbot/error.h"
#include "lingbot/result.h"
#include "run/clock.h"

namespace lingbot {

namespace {

bool has(const ExportOptions& ex, const char* format) {
  return std::find(ex.formats.begin(), ex.formats.end(), format) != ex.formats.end();
}

}  // namespace

FrameResult with_optimized_pose(FrameResult r, const std::array<float, 12>& c2w, float scale) {
  r.c2w = c2w;
  for (int a = 0; a < 3; ++a) {
    double t = 0;
    for (int b = 0; b < 3; ++b) {
      r.w2c[a * 4 + b] = c2w[b * 4 + a];
      t -= static_cast<double>(c2w[b * 4 + a]) * c2w[b * 4 + 3];
    }
    r.w2c[a * 4 + 3] = static_cast<float>(t);
  }
  const Sim3 p = Sim3::from_c2w(c2w.data());
  for (int k = 0; k < 3; ++k) r.pose_enc[k] = c2w[k * 4 + 3];
  for (int k = 0; k < 4; ++k) r.pose_enc[3 + k] = static_cast<float>(p.q[k]);
  if (scale != 1)
    for (float& d : r.depth) d *= scale;
  r.optimized = true;
  return r;
}

LoopClosing::LoopClosing(Config config, Engine* engine)
    : config_(std::move(config)), engine_(engine) {
  if (config_.close && loop_closure_available())
    closer_ = std::make_unique<LoopCloser>(config_.graph, [this](const LoopReport& r) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        solves_.push_back(r);
      }
      if (config_.on_solve) config_.on_solve(r);
    });
  if (config_.detect)
    detector_ = std::make_unique<LoopDetector>(*config_.detect,
                                               [this](const LoopClosure& l) { on_loop(l); });
}

LoopClosing::~LoopClosing() {
  // The detector first: its thread calls into the closer.
  detector_.reset();
  closer_.reset();
}

void LoopClosing::add(const FrameResult& r, std::shared_ptr<const Tensor> frame) {
  if (static_cast<int64_t>(streamed_.size()) <= r.index) streamed_.resize(r.index + 1);
  streamed_[r.index] = r.c2w;
  if (!r.keyframe) return;
  if (closer_) closer_->add_keyframe(r.index, Sim3::from_c2w(r.c2w.data()));
  if (detector_) detector_->add(r, std::move(frame));
}

void LoopClosing::on_loop(const LoopClosure& l) {
  if (config_.on_loop) config_.on_loop(l);
  // One edge a keyframe, its best verified loop (the detector hands those first): each costs
  // a two-frame step of the model.
  if (!closer_ || !engine_ || l.query == last_query_) return;
  last_query_ = l.query;
  const auto query = detector_->frame(l.query), match = detector_->frame(l.match);
  if (!query || !match) {
    std::lock_guard<std::mutex> lock(mu_);
    ++unmeasured_;
    return;
  }
  add_edge(measure_loop_edge(*engine_, config_.stream, *query, *match, l, config_.edge));
}

void LoopClosing::add_edge(const LoopEdge& e) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    edges_.push_back(e);
  }
  if (e.accepted && closer_) closer_->add_loop(e.edge);
}

void LoopClosing::finish(RunReport& report) {
  if (detector_) {
    detector_->finish();
    report.loop_detection = true;
    report.loop_stats = detector_->stats();
    report.loops = detector_->loops();
  }
  if (!closer_) return;
  const auto t0 = Clock::now();
  closer_->finish();
  report.loop_finish_wait_s = since(t0);
  const std::string error = closer_->error();
  if (!error.empty()) throw Error("loop closure failed: " + error);

  std::lock_guard<std::mutex> lock(mu_);
  report.loop_closure = true;
  report.loop_edges = edges_;
  report.loop_solves = solves_;
  report.loop_edges_unmeasured = unmeasured_;
  report.loop_measure_s = 0;
  for (const LoopEdge& e : edges_) report.loop_measure_s += e.seconds;
  report.loop_solve_s = 0;
  for (const LoopReport& r : solves_) report.loop_solve_s += r.summary.seconds;

  // Every frame's optimized pose; the streamed ones themselves, bit for bit, unless the last
  // solve kept a loop.
  const auto corrections = closer_->corrections();
  poses_.corrected =
      !solves_.empty() && solves_.back().summary.accepted > 0 && !corrections->empty();
  poses_.c2w = streamed_;
  poses_.scale.assign(streamed_.size(), 1.0f);
  if (poses_.corrected) {
    const std::vector<Sim3> opt = corrections->correct_all(streamed_);
    for (size_t i = 0; i < opt.size(); ++i) {
      poses_.c2w[i] = opt[i].rt();
      poses_.scale[i] = static_cast<float>(opt[i].s);
    }
  }
}

void LoopClosing::write_exports(const ExportOptions& ex, FrameSource* source,
                                RunReport& report) const {
  if (!closer_ || ex.out_dir.empty() || poses_.c2w.empty()) return;
  const auto t0 = Clock::now();
  namespace fs = std::filesystem;
  const std::string dir = ex.out_dir;
  auto trajectory = [&](const std::string& name, TrajectoryFormat format) {
    auto sink = make_trajectory_sink(dir + "/" + name, format,
                                     format == TrajectoryFormat::TUM ? ex.timestamp : nullptr);
    FrameResult f;
    for (size_t i = 0; i < poses_.c2w.size(); ++i) {
      f.index = static_cast<int64_t>(i);
      f.c2w = poses_.c2w[i];
      sink->add(f, nullptr);
    }
    sink->finish();
  };
  if (has(ex, "tum")) trajectory("trajectory_tum_optimized.txt", TrajectoryFormat::TUM);
  if (has(ex, "kitti")) trajectory("trajectory_kitti_optimized.txt", TrajectoryFormat::KITTI);

  // The exports that place points or cameras in the world, written again from the optimized
  // poses into a folder of their own, then each moved over the streamed one.
  const bool ply = has(ex, "ply"), glb = has(ex, "glb"), colmap = has(ex, "colmap"),
             nerfstudio = has(ex, "nerfstudio");
  if (poses_.corrected && (ply || glb || colmap || nerfstudio)) {
    const std::string tmp = dir + "/.loop-closure.partial";
    std::error_code ec;
    fs::remove_all(tmp, ec);
    sinks::make_folder(tmp);
    const FrameNamer name = ex.name ? ex.name : FrameNamer(default_frame_name);
    std::vector<std::unique_ptr<ResultSink>> sinks;
    std::vector<std::string> moved;
    if (ply) {
      sinks.push_back(make_ply_sink(tmp + "/points.ply", ex.points));
      moved.push_back("points.ply");
    }
    if (glb) {
      sinks.push_back(make_glb_sink(tmp + "/points.glb", ex.points));
      moved.push_back("points.glb");
    }
    if (colmap) {
      sinks.push_back(make_colmap_sink(tmp + "/colmap", ex.points, name));
      moved.push_back("colmap");
    }
    if (nerfstudio) {  // as make_sinks names its files
      NerfstudioOptions n;
      if (has(ex, "depth")) n.depth_dir = "depth";
      if (ply) n.ply_file = "points.ply";
      sinks.push_back(make_nerfstudio_sink(tmp + "/transforms.json", n, name));
      moved.push_back("transforms.json");
    }
    const RunResult run = read_result(dir);
    const bool images = has(ex, "images") || colmap || nerfstudio;
    const bool reread = !images && source && !source->live();
    for (int64_t i = 0; i < run.size() && i < static_cast<int64_t>(poses_.c2w.size()); ++i) {
      const FrameResult f =
          with_optimized_pose(result_frame(run, i), poses_.c2w[i], poses_.scale[i]);
      std::optional<Tensor> rgb;
      if (images) {
        rgb = read_result_image(run, i, name);
      } else if (reread) {
        try {
          rgb = source->get(i);
        } catch (const Error&) {
          rgb.reset();  // colours are a nicety: grey rather than no rewrite
        }
      }
      for (auto& s : sinks) s->add(f, rgb ? &*rgb : nullptr);
    }
    for (auto& s : sinks) s->finish();
    for (const std::string& m : moved) {
      if (fs::is_directory(dir + "/" + m)) fs::remove_all(dir + "/" + m, ec);
      fs::rename(tmp + "/" + m, dir + "/" + m, ec);
      if (ec) throw Error("cannot replace " + dir + "/" + m + ": " + ec.message());
    }
    fs::remove_all(tmp, ec);
  }
  report.loop_rewrite_s += since(t0);
}

}  // namespace lingbot
