// A saved session resumed in a fresh engine continues bit for bit: frames pushed after resume
// give exactly the results the uninterrupted session gives them, at cut points inside the scale
// block, right after it, right after a window eviction and later, under fixed keyframe intervals
// 1 and 3, adaptive (flow) keyframes, the e4m3 KV cache and a capped special stream. And a file
// that is not a whole snapshot of this model is refused with one clear Error.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "lingbot/device.h"
#include "lingbot/engine.h"
#include "lingbot/error.h"
#include "test_util.h"
#include "tiny_frames.h"

namespace lingbot {
namespace {

using Results = std::vector<FrameResult>;

// The fixture's 16 frames, then the same frames backwards: a sequence long enough for several
// evictions and the special stream, whose frames all differ from their neighbours.
std::vector<Tensor> frames(size_t n) {
  const std::vector<Tensor> base = test::tiny_frames();
  std::vector<Tensor> out;
  for (size_t i = 0; out.size() < n; ++i) {
    const size_t k = i % (2 * base.size());
    out.push_back(base[k < base.size() ? k : 2 * base.size() - 1 - k]);
  }
  return out;
}

bool same_bits(const FrameResult& a, const FrameResult& b) {
  const auto eq = [](const auto& x, const auto& y) {
    return x.size() == y.size() && std::memcmp(x.data(), y.data(), x.size() * sizeof(x[0])) == 0;
  };
  return a.index == b.index && a.keyframe == b.keyframe && a.scale_frame == b.scale_frame &&
         eq(a.pose_enc, b.pose_enc) && eq(a.c2w, b.c2w) && eq(a.w2c, b.w2c) &&
         eq(a.intrinsics, b.intrinsics) && eq(a.depth, b.depth) && eq(a.confidence, b.confidence);
}

void expect_same(const Results& got, const Results& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_TRUE(same_bits(got[i], want[i])) << what << ": frame " << want[i].index << " differs";
}

// The cameras of a trajectory() against the delivered results (no maps there).
void expect_same_cameras(const Results& got, const Results& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    FrameResult w = want[i];
    w.depth = got[i].depth;
    w.confidence = got[i].confidence;
    EXPECT_TRUE(same_bits(got[i], w)) << what << ": camera " << want[i].index << " differs";
    EXPECT_TRUE(got[i].depth.empty());
  }
}

class SessionSnapshots : public test::TempDirTest {
 protected:
  // Pushes `seq` through a session of `options`, saving a snapshot after each frame count in
  // `cuts`; then each snapshot is resumed by a fresh engine of `engine_options` and pushed the
  // rest. Every resumed run must give the uninterrupted run's results for its frames, and the
  // run with the saves must be the run without them.
  void check(const EngineOptions& engine_options, const StreamOptions& options, size_t n,
             const std::vector<size_t>& cuts) {
    const std::vector<Tensor> seq = frames(n);
    auto engine = Engine::create(engine_options);
    Results plain;
    {
      auto s = engine->start(options);
      const auto keep = [&](const FrameResult& r) { plain.push_back(r); };
      for (const Tensor& f : seq) s->push(f, keep);
      s->finish(keep);
      ASSERT_EQ(plain.size(), n);
    }
    // The frames whose step had run at each cut: their cameras are in the snapshot's
    // trajectory, and a resumed session delivers the frames after them. A GPU session delivers
    // results at the next push, so some may still be the saving session's to deliver; frames
    // buffered for the scale block have not run.
    std::map<size_t, size_t> ran;
    Results saved;
    {
      auto s = engine->start(options);
      const auto keep = [&](const FrameResult& r) { saved.push_back(r); };
      for (size_t i = 0; i <= n; ++i) {
        for (size_t c : cuts)
          if (c == i) {
            s->save(path("cut" + std::to_string(c) + ".lbs"));
            const Results t = s->trajectory();
            EXPECT_GE(t.size(), saved.size()) << "cut " << c;
            EXPECT_LE(t.size(), c) << "cut " << c;
            expect_same_cameras(t, Results(plain.begin(), plain.begin() + t.size()),
                                "trajectory at cut " + std::to_string(c));
            ran[c] = t.size();
          }
        if (i < n) s->push(seq[i], keep);
      }
      s->finish(keep);
    }
    expect_same(saved, plain, "the run with saves against the one without");

    auto fresh = Engine::create(engine_options);
    for (size_t c : cuts) {
      const std::string what = "resumed after " + std::to_string(c) + " frames";
      Results got;
      auto s = fresh->resume(path("cut" + std::to_string(c) + ".lbs"));
      const auto keep = [&](const FrameResult& r) { got.push_back(r); };
      for (size_t i = c; i < n; ++i) s->push(seq[i], keep);
      s->finish(keep);
      expect_same(got, Results(plain.begin() + ran[c], plain.end()), what);
      expect_same_cameras(s->trajectory(), plain, what + ", trajectory");
    }
  }

  static constexpr StreamOptions kTiny{.scale_frames = 4, .window = 6};
};

constexpr StreamOptions SessionSnapshots::kTiny;

// Scale frames 0-3, window 4-9; frame 10 evicts frame 4 into the special stream.
TEST_F(SessionSnapshots, ResumesBitwiseEveryFrameAKeyframe) {
  check({.model = "synthetic:1", .arch = "tiny"}, kTiny, 20, {0, 2, 4, 11, 17});
}

// Interval 3: keyframes 4, 7, 10, ...; the window of 6 keyframes is full at frame 19, and frame
// 22 evicts. Cuts after a non-keyframe (6), inside the scale block (3) and after the eviction.
TEST_F(SessionSnapshots, ResumesBitwiseWithKeyframeInterval3) {
  StreamOptions o = kTiny;
  o.keyframe_interval = 3;
  check({.model = "synthetic:1", .arch = "tiny"}, o, 26, {3, 6, 23});
}

TEST_F(SessionSnapshots, ResumesBitwiseWithFlowKeyframes) {
  StreamOptions o = kTiny;
  o.flow_threshold = 0.5f;
  o.max_non_keyframe_gap = 3;
  check({.model = "synthetic:1", .arch = "tiny"}, o, 20, {2, 5, 12});
}

// The e4m3 cache with its per-layer scales, and a capped special stream (the camera head's
// cache trimmed behind its pinned scale frames).
TEST_F(SessionSnapshots, ResumesBitwiseWithAnFp8CacheAndACappedStream) {
  StreamOptions o = kTiny;
  o.max_special_frames = 2;
  check({.model = "synthetic:1", .arch = "tiny", .precision = "fp8"}, o, 18, {1, 11, 14});
}

// The same on a GPU: the pages go through Backend::read_bytes/write_bytes of the CUDA backend,
// in bf16 and in e4m3 (whose per-layer scales live on the device).
class GpuSnapshots : public SessionSnapshots {
 protected:
  void SetUp() override {
    if (usable_cuda_devices() == 0) GTEST_SKIP() << "no usable GPU";
    SessionSnapshots::SetUp();
  }
};

TEST_F(GpuSnapshots, ResumesBitwiseInBf16) {
  check({.model = "synthetic:1", .arch = "tiny", .device = "cuda", .precision = "bf16"}, kTiny, 20,
        {0, 4, 11, 17});
}

TEST_F(GpuSnapshots, ResumesBitwiseWithAnFp8CacheAndACappedStream) {
  StreamOptions o = kTiny;
  o.max_special_frames = 2;
  check({.model = "synthetic:1", .arch = "tiny", .device = "cuda", .precision = "fp8"}, o, 18,
        {1, 11, 14});
}

TEST_F(SessionSnapshots, InspectDescribesTheSavedState) {
  auto engine = Engine::create({.model = "synthetic:1", .arch = "tiny"});
  auto s = engine->start(kTiny);
  const std::vector<Tensor> seq = frames(12);
  for (const Tensor& f : seq) s->push(f, [](const FrameResult&) {});
  s->save(path("s.lbs"));
  const SnapshotInfo info = read_snapshot_info(path("s.lbs"));
  EXPECT_EQ(info.arch, "tiny");
  EXPECT_EQ(info.compute, "F32");
  EXPECT_EQ(info.kv_cache, "F32");
  EXPECT_EQ(info.weights.size(), 16u);
  EXPECT_EQ(info.frames, 12);
  EXPECT_EQ(info.stored_frames, 12);
  EXPECT_EQ(info.scale_frames, 4);
  EXPECT_EQ(info.window_frames, 6);
  EXPECT_EQ(info.special_frames, 2);  // frames 4 and 5 evicted
  EXPECT_EQ(info.trajectory, 12);
  EXPECT_EQ(info.height, seq[0].dim(1));
  EXPECT_EQ(info.options.window, 6);
  EXPECT_EQ(info.bytes, std::filesystem::file_size(path("s.lbs")));
  // tiny: 24 layers, 2 heads of 64; 6 + 4 x 5 tokens a frame; K and V of 10 pages, 12 stream rows.
  const size_t row = 2 * 64 * sizeof(float) * 2;
  EXPECT_EQ(info.kv_bytes, 24 * row * (10 * (6 + 20) + 12));
  EXPECT_GT(info.camera_bytes, 0u);
  EXPECT_LT(info.kv_bytes + info.camera_bytes, info.bytes);
}

using test::error_of;

TEST_F(SessionSnapshots, RefusesAnotherModelOrPrecision) {
  {
    auto engine = Engine::create({.model = "synthetic:1", .arch = "tiny"});
    auto s = engine->start(kTiny);
    for (const Tensor& f : frames(5)) s->push(f, [](const FrameResult&) {});
    s->save(path("s.lbs"));
  }
  for (const EngineOptions& other :
       {EngineOptions{.model = "synthetic:2", .arch = "tiny"},
        EngineOptions{.model = "synthetic:1", .arch = "tiny", .precision = "fp8"}}) {
    auto engine = Engine::create(other);
    const std::string e = error_of([&] { engine->resume(path("s.lbs")); });
    EXPECT_NE(e.find("saved by tiny (F32, KV cache F32, weights"), std::string::npos) << e;
    EXPECT_NE(e.find("this engine runs tiny"), std::string::npos) << e;
  }
}

TEST_F(SessionSnapshots, RefusesTruncatedDamagedAndForeignFiles) {
  auto engine = Engine::create({.model = "synthetic:1", .arch = "tiny"});
  {
    auto s = engine->start(kTiny);
    for (const Tensor& f : frames(7)) s->push(f, [](const FrameResult&) {});
    s->save(path("s.lbs"));
  }
  std::string bytes;
  {
    std::ifstream in(path("s.lbs"), std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  const auto write = [&](const std::string& name, const std::string& data) {
    std::ofstream(path(name), std::ios::binary) << data;
    return path(name);
  };
  const auto refused = [&](const std::string& file, const std::string& why) {
    const std::string e = error_of([&] { engine->resume(file); });
    EXPECT_NE(e.find(file), std::string::npos) << why << ": " << e;
    EXPECT_EQ(e.find('\n'), std::string::npos) << why << ": " << e;
    EXPECT_NE(e, "(no error)") << why;
    return e;
  };
  // Cut anywhere: in the length, the header, the tensors.
  for (size_t n : {size_t{0}, size_t{5}, size_t{100}, bytes.size() / 2, bytes.size() - 1})
    EXPECT_NE(refused(write("cut.lbs", bytes.substr(0, n)), "cut at " + std::to_string(n))
                  .find("not a usable session snapshot"),
              std::string::npos);
  // Damaged header bytes: whatever they turn into is refused or, in a string, harmless.
  uint64_t header = 0;
  std::memcpy(&header, bytes.data(), 8);
  for (size_t at = 8; at < 8 + header; at += 7) {
    std::string d = bytes;
    d[at] = static_cast<char>(d[at] ^ 0x5a);
    try {
      auto s = engine->resume(write("damaged.lbs", d));
      (void)s;
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << e.what();
    }
  }
  // Another version, and a checkpoint rather than a snapshot.
  std::string v2 = bytes;
  const size_t at = v2.find("\"version\":\"1\"");
  ASSERT_NE(at, std::string::npos);
  v2[at + 11] = '2';
  EXPECT_NE(refused(write("v2.lbs", v2), "version 2").find("version 2; this build reads version 1"),
            std::string::npos);
  EXPECT_NE(refused(test::fixtures_dir() + "/tiny/stream_kf1.safetensors", "fixture")
                .find("no lingbot-session format"),
            std::string::npos);
  EXPECT_EQ(error_of([&] { engine->resume(path("missing.lbs")); }).find('\n'), std::string::npos);
}

TEST_F(SessionSnapshots, AFailedSaveLeavesNoFile) {
  auto engine = Engine::create({.model = "synthetic:1", .arch = "tiny"});
  auto s = engine->start(kTiny);
  for (const Tensor& f : frames(5)) s->push(f, [](const FrameResult&) {});
  const std::string bad = path("no/such/folder/s.lbs");
  EXPECT_NE(error_of([&] { s->save(bad); }).find("cannot write"), std::string::npos);
  EXPECT_FALSE(std::filesystem::exists(bad));
  // Saving over an earlier snapshot replaces it whole, and nothing is left beside it.
  s->save(path("s.lbs"));
  s->push(frames(6)[5], [](const FrameResult&) {});
  s->save(path("s.lbs"));
  EXPECT_EQ(read_snapshot_info(path("s.lbs")).frames, 6);
  EXPECT_FALSE(std::filesystem::exists(path("s.lbs.partial")));
}

}  // namespace
}  // namespace lingbot
