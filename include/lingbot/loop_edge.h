// Public API: a verified loop as a pose-graph edge, a Sim(3) measured by the model.
//
//   lingbot::LoopDetector loops(o, [&](const lingbot::LoopClosure& l) {
//     lingbot::LoopEdge e = lingbot::measure_loop_edge(*engine, stream, *loops.frame(l.query),
//                                                      *loops.frame(l.match), l);
//     if (e.accepted) closer.add_loop(e.edge);
//   });
//
// The two frames run through the model as one two-frame block (the bidirectional step that
// starts every sequence) in a session of their own, so the live session is untouched. That gives
// their relative pose and depth maps in the pair's own units. The scale of each frame's stream
// against the pair is the median, over the verification's inliers, of the streamed depth over
// the pair's depth at that pixel; the edge is the pair's relative pose carried into the stream's
// units at both ends. The edge is dropped when the model's relative pose disagrees with the
// images' own geometry: its rotation against the one the essential matrix (the verified
// fundamental matrix and the pair's intrinsics) gives, or the inliers' mean distance to the
// epipolar lines the model's pose predicts.
#pragma once

#include <string>

#include "lingbot/engine.h"
#include "lingbot/loop.h"

namespace lingbot {

struct LoopEdgeOptions {
  // Between the model's relative rotation and the essential matrix's. The model's pair pose is
  // good to a few degrees where it sees the same place; a wrong pose is off by tens.
  double max_rotation_deg = 10;
  // Mean over the inliers of the symmetric distance to the epipolar lines of the model's
  // relative pose, in pixels of the model input. 1 degree of rotation at a 518-pixel-wide
  // frame's focal length (~450 px) moves a point ~8 px; RANSAC's own threshold is 2.
  double max_epipolar_px = 12;
  // Inliers with a finite positive depth in both the stream and the pair, per frame, that the
  // scale needs (the median of fewer is noise).
  int min_depth_pairs = 8;
};

// What the two-frame block gave for the pair, query first: poses in the pair's own world and
// units, intrinsics, and its depth at each inlier (verification.inlier_points' order).
struct PairGeometry {
  std::array<float, 12> query_c2w{}, match_c2w{};
  std::array<float, 9> query_intrinsics{}, match_intrinsics{};
  std::vector<float> query_depths, match_depths;
};

struct LoopEdge {
  int64_t query = 0, match = 0;
  bool accepted = false;
  // Why it was dropped: "depth" (too few depth pairs for the scale), "baseline" (the pair's
  // cameras at one place: nothing to check the epipolar geometry against), "geometry" (no
  // essential matrix from the inliers), "rotation", "epipolar"; empty when accepted.
  std::string reason;
  // from = match, to = query, relative = T_match^-1 T_query in the stream's units (its scale:
  // match's units over query's), score = the verification's inliers.
  PoseEdge edge;
  double scale_query = 0, scale_match = 0;  // stream depth / pair depth, medians at the inliers
  int depth_pairs_query = 0, depth_pairs_match = 0;
  double rotation_error_deg = 0;  // model vs essential matrix
  double epipolar_error_px = 0;   // mean over the inliers under the model's relative pose
  double seconds = 0;             // the two-frame block and the checks (measure_loop_edge)
};

// The edge from the loop (its inliers and the streamed depths there) and the pair's geometry;
// no model involved (the checks need OpenCV: loop_detection_available()).
LoopEdge loop_edge_from_pair(const LoopClosure& loop, const PairGeometry& pair,
                             const LoopEdgeOptions& options = {});

// The two frames (F32 [3, H, W], the model inputs the stream saw) through a two-frame block of
// `engine` in a new session (scale_frames 2; `stream`'s camera iterations), its depths sampled
// at the inliers (nearest pixel), then loop_edge_from_pair. Safe beside a live session of the
// same engine, from another thread (the engine runs one step at a time: a live step waits for
// the pair's, which costs about two frames).
LoopEdge measure_loop_edge(Engine& engine, const StreamOptions& stream, const Tensor& query_frame,
                           const Tensor& match_frame, const LoopClosure& loop,
                           const LoopEdgeOptions& options = {});

}  // namespace lingbot
