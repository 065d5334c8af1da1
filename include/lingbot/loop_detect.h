// Public API: loop detection beside a stream. Each keyframe's place descriptor
// (StreamOptions::descriptors) goes into an index; a new keyframe asks it for the most similar
// keyframes older than a temporal exclusion, and each candidate is verified on the two images
// themselves (ORB features, Lowe's ratio test, a RANSAC fundamental matrix). A loop is accepted
// only by that geometric check: retrieval proposes, verification decides.
//
//   lingbot::LoopDetector loops({.min_gap = 64}, [](const lingbot::LoopClosure& l) { ... });
//   session->push(frame, [&](const lingbot::FrameResult& r) { loops.add(r, frame); });
//   loops.finish();
//
// `lingbot::run` does this on its own when RunOptions::loop is set. Verification needs OpenCV
// at build time (loop_detection_available()); without it the calls throw Error.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "lingbot/engine.h"
#include "lingbot/tensor.h"

namespace lingbot {

struct LoopOptions {
  // Temporal exclusion: a keyframe is a candidate for frame i only when its index is at most
  // i - min_gap. 0 = the frames the model still attends to (scale frames aside): window x
  // keyframe interval of the run (lingbot::run fills it in; the detector alone takes 64).
  int64_t min_gap = 0;
  int top_k = 3;                // candidates verified per keyframe, most similar first
  float min_similarity = 0.0f;  // cosine floor of retrieval (descriptors of unit length)
  // Verification: accepted when both hold. Inliers of the fundamental matrix among the matches
  // that pass the ratio test, and their share of those matches. An unrelated pair leaves a few
  // chance matches of which RANSAC's 7-point model explains ~10 at most; a revisit leaves
  // tens to hundreds, most of them consistent.
  int min_inliers = 40;
  float min_inlier_ratio = 0.35f;
  float ratio = 0.8f;       // Lowe's ratio test (nearest / second nearest Hamming distance)
  int max_features = 1500;  // ORB keypoints per image
  float ransac_px = 2.0f;   // RANSAC threshold: distance to the epipolar line, pixels
  // Keyframes waiting for the detector before new ones are skipped; each holds its frame (2.3 MB
  // at 518x378) and depth map (0.8 MB) until its features are extracted.
  int queue = 8;
  // Bytes of keyframes' model inputs kept for LoopDetector::frame (a loop edge runs the two
  // frames through the model again), one byte a value (0.59 MB at 518x378): 0 keeps none. Past
  // the budget every other kept frame is dropped, oldest first, so what is kept thins evenly
  // over the run rather than losing its beginning, where loops close to.
  int64_t frame_memory = 0;
};

// What geometric verification of two images found.
struct PairVerification {
  int keypoints_a = 0, keypoints_b = 0;
  int matches = 0;         // mutual nearest neighbours that pass the ratio test
  int inliers = 0;         // of those, consistent with the RANSAC fundamental matrix
  float inlier_ratio = 0;  // inliers / matches (0 when there are none)
  bool accepted = false;   // inliers >= min_inliers and inlier_ratio >= min_inlier_ratio
  // x_b^T F x_a = 0 for corresponding pixels (homogeneous, pixels of the images given),
  // row-major; zeros when no model was found.
  std::array<double, 9> fundamental{};
  // The inlier correspondences: pixel (x, y) in a, then (x, y) in b.
  std::vector<std::array<float, 4>> inlier_points;
  // The same inliers as indices of the keypoints of a and of b.
  std::vector<std::array<int, 2>> inlier_keypoints;
};

// One accepted loop: the new keyframe `query` sees the place of the older keyframe `match`.
// What a pose-graph back-end needs besides: both frames' streamed poses and intrinsics (pixels
// of the model input), the verified correspondences, query pixel first, and the streamed depth
// at each of them (the loop edge's scale comes from those).
struct LoopClosure {
  int64_t query = 0, match = 0;                    // frame indices of the run
  float similarity = 0;                            // cosine of the place descriptors
  PairVerification verification;                   // a = query, b = match
  std::array<float, 12> query_c2w{}, match_c2w{};  // row-major 3x4, as streamed
  std::array<float, 9> query_intrinsics{}, match_intrinsics{};
  // The streamed depth map of each frame at each inlier (its nearest pixel), in the order of
  // verification.inlier_points; NaN where the result had no depth map.
  std::vector<float> query_depths, match_depths;
};

// Costs and counts of a run's loop detection.
struct LoopStats {
  int64_t keyframes = 0;   // indexed
  int64_t skipped = 0;     // keyframes dropped because the detector's queue was full
  int64_t candidates = 0;  // pairs verified
  int64_t accepted = 0;
  double extract_s = 0;      // features of each keyframe (detector thread)
  double retrieve_s = 0;     // index look-ups
  double verify_s = 0;       // matching and RANSAC
  double finish_wait_s = 0;  // the run waiting at its end for the keyframes still queued
};

// Whether this build has loop detection (OpenCV was found at configure time).
bool loop_detection_available();

// Verifies two images of one size: F32 [3, H, W] in [0, 1] (model input) or U8 [H, W, 3].
PairVerification verify_pair(const Tensor& a, const Tensor& b, const LoopOptions& options = {});

// Cosine top-k over the keyframes' descriptors: host memory, 4 bytes per descriptor value.
class DescriptorIndex {
 public:
  struct Hit {
    int64_t frame = 0;
    float similarity = 0;
  };
  // Descriptors of one length (unit vectors); frames in increasing order.
  void add(int64_t frame, const std::vector<float>& descriptor);
  // The k most similar entries of frame <= max_frame with similarity >= floor, best first
  // (ties: the older frame first).
  std::vector<Hit> query(const std::vector<float>& descriptor, int64_t max_frame, int k,
                         float floor) const;
  int64_t size() const { return static_cast<int64_t>(frames_.size()); }
  size_t bytes() const { return values_.size() * sizeof(float) + frames_.size() * 8; }

 private:
  int64_t dim_ = 0;
  std::vector<int64_t> frames_;
  std::vector<float> values_;  // [size, dim]
};

// Detection on a thread of its own, fed keyframes without waiting: add() only queues (a full
// queue skips the keyframe and counts it), so the stream never waits for it.
class LoopDetector {
 public:
  using Callback = std::function<void(const LoopClosure&)>;
  // on_loop runs on the detector's thread for each accepted loop, a keyframe's loops with the
  // most inliers first.
  LoopDetector(const LoopOptions& options, Callback on_loop = {});
  ~LoopDetector();
  LoopDetector(const LoopDetector&) = delete;
  LoopDetector& operator=(const LoopDetector&) = delete;
  // A result and the frame the model saw (F32 [3, H, W]); frames that are not keyframes, or
  // that carry no descriptor, are ignored.
  void add(const FrameResult& result, std::shared_ptr<const Tensor> frame);
  // Waits for the queued keyframes; add() after finish() throws.
  void finish();
  // Accepted so far, in the order found (a keyframe's loops with the most inliers first).
  std::vector<LoopClosure> loops() const;
  LoopStats stats() const;
  // Keyframe `index`'s model input (F32 [3, H, W]) while LoopOptions::frame_memory keeps it,
  // else null. Safe from any thread, on_loop included.
  std::shared_ptr<const Tensor> frame(int64_t index) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace lingbot
