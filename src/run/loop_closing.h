// A run's loop closure (RunOptions::loop): the detector beside the stream, each verified loop
// measured by the model into a Sim(3) edge, the pose graph's background closer, and at the end
// every frame's optimized pose and the outputs written from it. lingbot::run owns one per
// streaming run; its parts' threads are the detector's (detection, the two-frame blocks) and the
// closer's (the solves); the device thread only hands over each result.
#pragma once

#include <array>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "lingbot/loop.h"
#include "lingbot/run.h"

namespace lingbot {

class LoopClosing {
 public:
  struct Config {
    std::optional<LoopOptions> detect;  // nullopt: no detector, edges come through add_edge
    bool close = true;                  // build the pose graph (where Ceres is built in)
    LoopEdgeOptions edge;
    PoseGraphOptions graph;
    StreamOptions stream;  // the run's: the two-frame block takes its camera iterations
    std::function<void(const LoopClosure&)> on_loop;
    std::function<void(const LoopReport&)> on_solve;
  };
  // `engine` measures the loop edges (null: only edges given to add_edge reach the graph).
  LoopClosing(Config config, Engine* engine);
  ~LoopClosing();

  bool closes() const { return closer_ != nullptr; }
  // Every result, in frame order, from one thread (the device's): its streamed pose is kept
  // (48 bytes a frame); a keyframe becomes a graph node and goes to the detector with `frame`.
  void add(const FrameResult& result, std::shared_ptr<const Tensor> frame);
  // A measured loop edge (any thread): kept for the report; into the graph when accepted.
  void add_edge(const LoopEdge& edge);
  // Waits for the detector's queue and the last solve, then fixes every frame's optimized pose
  // and fills the report's loop parts. Throws Error when detection or a solve failed.
  void finish(RunReport& report);

  // After finish(): every frame's optimized c2w (rigid [R | t]) and scale. Exactly the streamed
  // poses and 1 when no loop was accepted in the last solve (corrected false).
  struct Poses {
    std::vector<std::array<float, 12>> c2w;
    std::vector<float> scale;
    bool corrected = false;
  };
  const Poses& optimized() const { return poses_; }

  // Under ex.out_dir, after predictions.safetensors is complete: the TUM and KITTI trajectories'
  // _optimized twins (ex.formats' tum, kitti) and, when corrected, ply, glb, colmap and
  // nerfstudio rewritten from the optimized poses (each replaced whole). Colours come from
  // images/ when the run wrote it, else from `source` read again (not live), else grey.
  void write_exports(const ExportOptions& ex, FrameSource* source, RunReport& report) const;

 private:
  void on_loop(const LoopClosure& loop);

  Config config_;
  Engine* engine_;
  std::unique_ptr<LoopCloser> closer_;
  std::unique_ptr<LoopDetector> detector_;
  std::vector<std::array<float, 12>> streamed_;  // every frame's c2w, the device thread's
  mutable std::mutex mu_;                        // the rest, from the detector's and closer's
  std::vector<LoopEdge> edges_;
  std::vector<LoopReport> solves_;
  int64_t unmeasured_ = 0;
  int64_t last_query_ = -1;  // the detector's thread: one edge measured a keyframe
  Poses poses_;
};

// A result moved to an optimized pose: c2w (rigid) and its inverse, pose_enc's translation and
// quaternion, depth times `scale`, optimized = true.
FrameResult with_optimized_pose(FrameResult r, const std::array<float, 12>& c2w, float scale);

}  // namespace lingbot
