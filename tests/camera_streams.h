// Streams of several cameras on one engine, each pushed from its own thread, against each
// alone: the helpers of the batched-sessions tests (CPU and GPU).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <thread>
#include <vector>

#include "lingbot/engine.h"
#include "test_util.h"
#include "tiny_frames.h"

namespace lingbot::test::streams {

using Results = std::vector<FrameResult>;

// One camera: its frames and options. Four of them differ in length, window, scale block and
// keyframe rule (fixed intervals 1, 2, 3 and adaptive), and start at other frames.
struct Camera {
  std::vector<Tensor> frames;
  StreamOptions options;
};

inline std::vector<Camera> cameras(size_t n) {
  const std::vector<Tensor> all = tiny_frames();
  std::vector<Camera> cams(4);
  for (size_t i = 0; i < cams.size(); ++i)
    for (size_t t = 0; t < all.size(); ++t) cams[i].frames.push_back(all[(t + 3 * i) % all.size()]);
  cams[0].options = {.scale_frames = 4, .window = 6};
  cams[1].options = {.scale_frames = 3, .window = 4, .keyframe_interval = 2};
  cams[1].frames.resize(11);
  cams[2].options = {.scale_frames = 2, .window = 3, .keyframe_interval = 3};
  cams[2].frames.resize(14);
  cams[3].options = {
      .scale_frames = 3, .window = 5, .flow_threshold = 0.5f, .max_non_keyframe_gap = 3};
  cams[3].frames.resize(9);
  cams.resize(n);
  return cams;
}

inline void push_all(Session& session, const Camera& cam, Results& out) {
  const auto keep = [&](const FrameResult& r) { out.push_back(r); };
  for (const Tensor& f : cam.frames) session.push(f, keep);
  session.finish(keep);
}

inline Results run_alone(Engine& engine, const Camera& cam) {
  Results out;
  push_all(*engine.start(cam.options), cam, out);
  return out;
}

// Relative tolerances per output, the fixtures' measure over a whole sequence.
struct Tolerance {
  double pose = 1e-5, depth = 1e-5;
};

inline void expect_same(const Results& got, const Results& alone, const std::string& what,
                        Tolerance tol = {}) {
  ASSERT_EQ(got.size(), alone.size()) << what;
  std::vector<float> pg, pa, dg, da, cg, ca;
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].index, static_cast<int64_t>(i)) << what;
    EXPECT_EQ(got[i].keyframe, alone[i].keyframe) << what << ", frame " << i;
    pg.insert(pg.end(), got[i].pose_enc.begin(), got[i].pose_enc.end());
    pa.insert(pa.end(), alone[i].pose_enc.begin(), alone[i].pose_enc.end());
    dg.insert(dg.end(), got[i].depth.begin(), got[i].depth.end());
    da.insert(da.end(), alone[i].depth.begin(), alone[i].depth.end());
    cg.insert(cg.end(), got[i].confidence.begin(), got[i].confidence.end());
    ca.insert(ca.end(), alone[i].confidence.begin(), alone[i].confidence.end());
  }
  ASSERT_EQ(dg.size(), da.size()) << what;
  EXPECT_LE(compare(pg, pa).relative(), tol.pose) << what << " pose";
  EXPECT_LE(compare(dg, da).relative(), tol.depth) << what << " depth";
  EXPECT_LE(compare(cg, ca).relative(), tol.depth) << what << " confidence";
}

// n sessions, each pushed from its own thread, against each alone.
inline void check_threads(Engine& engine, size_t n, Tolerance tol = {}) {
  const std::vector<Camera> cams = cameras(n);
  std::vector<Results> alone, got(n);
  for (const Camera& cam : cams) alone.push_back(run_alone(engine, cam));
  std::vector<std::thread> threads;
  for (size_t i = 0; i < n; ++i)
    threads.emplace_back([&, i] { push_all(*engine.start(cams[i].options), cams[i], got[i]); });
  for (auto& t : threads) t.join();
  for (size_t i = 0; i < n; ++i)
    expect_same(got[i], alone[i], "camera " + std::to_string(i) + " of " + std::to_string(n), tol);
}

}  // namespace lingbot::test::streams
