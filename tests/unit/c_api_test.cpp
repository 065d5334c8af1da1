// The C API (lingbot/lingbot_c.h): the tiny fixture through it gives exactly what the C++ API
// gives, and every failure is a status with a one-line message, never an exception.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "io/image.h"
#include "io/preprocess.h"
#include "lingbot/engine.h"
#include "lingbot/lingbot_c.h"
#include "test_util.h"
#include "tiny_frames.h"

namespace lingbot {
namespace {

// A C result copied out while its buffers are valid.
struct CResult {
  lingbot_result r;
  std::vector<float> depth, confidence;
};

void collect_c(const lingbot_result* r, void* user_data) {
  auto* out = static_cast<std::vector<CResult>*>(user_data);
  CResult c{*r, {}, {}};
  const size_t n = static_cast<size_t>(r->height) * r->width;
  if (r->depth) c.depth.assign(r->depth, r->depth + n);
  if (r->confidence) c.confidence.assign(r->confidence, r->confidence + n);
  c.r.depth = c.r.confidence = nullptr;
  out->push_back(std::move(c));
}

void expect_one_line(const char* message) {
  ASSERT_NE(message, nullptr);
  const std::string m = message;
  EXPECT_FALSE(m.empty());
  EXPECT_EQ(m.find('\n'), std::string::npos) << m;
}

class CApi : public ::testing::Test {
 protected:
  void SetUp() override {
    lingbot_engine_options eo = lingbot_engine_default_options();
    eo.model = "synthetic:1";
    eo.arch = "tiny";
    ASSERT_EQ(lingbot_engine_create(&eo, &engine_), LINGBOT_OK) << lingbot_last_error();
    ASSERT_NE(engine_, nullptr);
  }
  void TearDown() override {
    EXPECT_EQ(lingbot_session_free(session_), LINGBOT_OK);
    EXPECT_EQ(lingbot_engine_free(engine_), LINGBOT_OK);
  }
  lingbot_session* start(int scale_frames) {
    lingbot_stream_options so = lingbot_stream_default_options();
    so.scale_frames = scale_frames;
    so.window = 6;
    EXPECT_EQ(lingbot_session_start(engine_, &so, &session_), LINGBOT_OK) << lingbot_last_error();
    return session_;
  }
  lingbot_engine* engine_ = nullptr;
  lingbot_session* session_ = nullptr;
};

TEST(CApiDefaults, MatchTheCppApi) {
  const StreamOptions d;
  const lingbot_stream_options c = lingbot_stream_default_options();
  EXPECT_EQ(c.scale_frames, d.scale_frames);
  EXPECT_EQ(c.window, d.window);
  EXPECT_EQ(c.keyframe_interval, d.keyframe_interval);
  EXPECT_EQ(c.camera_iterations, d.camera_iterations);
  EXPECT_EQ(c.cross_frame_special != 0, d.cross_frame_special);
  EXPECT_EQ(c.camera_only != 0, d.camera_only);
  EXPECT_EQ(c.include_scale_frames != 0, d.include_scale_frames);
  EXPECT_EQ(c.flow_threshold, d.flow_threshold);
  EXPECT_EQ(c.max_non_keyframe_gap, d.max_non_keyframe_gap);
  EXPECT_EQ(c.max_special_frames, d.max_special_frames);
  const lingbot_engine_options e = lingbot_engine_default_options();
  EXPECT_EQ(e.model, nullptr);
  EXPECT_EQ(e.threads, EngineOptions{}.threads);
  EXPECT_STRNE(lingbot_version(), "");
  EXPECT_STREQ(lingbot_status_name(LINGBOT_ERROR_FAILED), "LINGBOT_ERROR_FAILED");
}

// The fixture's keyframe-interval-3 stream, through both APIs on one engine each: every field of
// every frame is bit for bit the same.
TEST(CApiParity, TinyFixtureGivesExactlyTheCppResults) {
  const std::vector<Tensor> frames = test::tiny_frames();
  ASSERT_EQ(frames.size(), 16u);

  auto engine = Engine::create({.model = "synthetic:1", .arch = "tiny"});
  auto session = engine->start({.scale_frames = 4, .window = 6, .keyframe_interval = 3});
  std::vector<FrameResult> want;
  auto collect = [&](const FrameResult& r) { want.push_back(r); };
  for (const Tensor& f : frames) session->push(f, collect);
  session->finish(collect);
  ASSERT_EQ(want.size(), 16u);

  lingbot_engine_options eo = lingbot_engine_default_options();
  eo.model = "synthetic:1";
  eo.arch = "tiny";
  lingbot_engine* ce = nullptr;
  ASSERT_EQ(lingbot_engine_create(&eo, &ce), LINGBOT_OK) << lingbot_last_error();
  lingbot_stream_options so = lingbot_stream_default_options();
  so.scale_frames = 4;
  so.window = 6;
  so.keyframe_interval = 3;
  lingbot_session* cs = nullptr;
  ASSERT_EQ(lingbot_session_start(ce, &so, &cs), LINGBOT_OK) << lingbot_last_error();
  std::vector<CResult> got;
  for (const Tensor& f : frames) {
    // The buffer is only lent for the call: overwrite it afterwards to show nothing keeps it.
    std::vector<float> buffer(f.f32(), f.f32() + f.numel());
    ASSERT_EQ(lingbot_session_push(cs, buffer.data(), 3, static_cast<int>(f.dim(1)),
                                   static_cast<int>(f.dim(2)), collect_c, &got),
              LINGBOT_OK)
        << lingbot_last_error();
    std::fill(buffer.begin(), buffer.end(), -1.f);
    // Flushed after every push: the same results, each out before the next push.
    ASSERT_EQ(lingbot_session_flush(cs, collect_c, &got), LINGBOT_OK) << lingbot_last_error();
    const size_t pushed = static_cast<size_t>(&f - frames.data()) + 1;
    EXPECT_EQ(got.size(), pushed < 4 ? 0 : pushed);
  }
  ASSERT_EQ(lingbot_session_finish(cs, collect_c, &got), LINGBOT_OK) << lingbot_last_error();
  EXPECT_EQ(lingbot_session_free(cs), LINGBOT_OK);
  EXPECT_EQ(lingbot_engine_free(ce), LINGBOT_OK);

  ASSERT_EQ(got.size(), want.size());
  auto same = [](const float* a, const float* b, size_t n) {
    return std::memcmp(a, b, n * sizeof(float)) == 0;
  };
  for (size_t i = 0; i < want.size(); ++i) {
    const FrameResult& w = want[i];
    const lingbot_result& g = got[i].r;
    EXPECT_EQ(g.index, w.index) << i;
    EXPECT_EQ(g.keyframe != 0, w.keyframe) << i;
    EXPECT_EQ(g.height, w.height) << i;
    EXPECT_EQ(g.width, w.width) << i;
    EXPECT_TRUE(same(g.pose_enc, w.pose_enc.data(), 9)) << i;
    EXPECT_TRUE(same(g.c2w, w.c2w.data(), 12)) << i;
    EXPECT_TRUE(same(g.w2c, w.w2c.data(), 12)) << i;
    EXPECT_TRUE(same(g.intrinsics, w.intrinsics.data(), 9)) << i;
    ASSERT_EQ(got[i].depth.size(), w.depth.size()) << i;
    ASSERT_EQ(got[i].confidence.size(), w.confidence.size()) << i;
    EXPECT_TRUE(same(got[i].depth.data(), w.depth.data(), w.depth.size())) << i;
    EXPECT_TRUE(same(got[i].confidence.data(), w.confidence.data(), w.confidence.size())) << i;
  }
}

TEST(CApiErrors, AMissingModelFileIsAnErrorWithOneLine) {
  lingbot_engine_options eo = lingbot_engine_default_options();
  eo.model = "no/such/dir/model.safetensors";
  lingbot_engine* engine = reinterpret_cast<lingbot_engine*>(&eo);  // overwritten with NULL
  EXPECT_EQ(lingbot_engine_create(&eo, &engine), LINGBOT_ERROR_FAILED);
  EXPECT_EQ(engine, nullptr);
  expect_one_line(lingbot_last_error());
  EXPECT_NE(std::string(lingbot_last_error()).find("no/such/dir/model.safetensors"),
            std::string::npos)
      << lingbot_last_error();
}

TEST(CApiErrors, BadEngineOptionsAreErrors) {
  lingbot_engine_options eo = lingbot_engine_default_options();
  lingbot_engine* engine = nullptr;
  EXPECT_EQ(lingbot_engine_create(&eo, &engine), LINGBOT_ERROR_FAILED);  // no model
  expect_one_line(lingbot_last_error());
  eo.model = "synthetic:1";
  eo.arch = "no-such-arch";
  EXPECT_EQ(lingbot_engine_create(&eo, &engine), LINGBOT_ERROR_FAILED);
  EXPECT_NE(std::string(lingbot_last_error()).find("no-such-arch"), std::string::npos);
  eo.arch = "tiny";
  eo.device = "abacus";
  EXPECT_EQ(lingbot_engine_create(&eo, &engine), LINGBOT_ERROR_FAILED);
  EXPECT_NE(std::string(lingbot_last_error()).find("abacus"), std::string::npos);
  EXPECT_EQ(engine, nullptr);
  EXPECT_EQ(lingbot_engine_create(nullptr, &engine), LINGBOT_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(lingbot_engine_create(&eo, nullptr), LINGBOT_ERROR_INVALID_ARGUMENT);
}

TEST_F(CApi, BadStreamOptionsAreErrors) {
  lingbot_stream_options so = lingbot_stream_default_options();
  so.scale_frames = 0;
  lingbot_session* s = nullptr;
  EXPECT_EQ(lingbot_session_start(engine_, &so, &s), LINGBOT_ERROR_FAILED);
  EXPECT_EQ(s, nullptr);
  expect_one_line(lingbot_last_error());
  EXPECT_EQ(lingbot_session_start(nullptr, &so, &s), LINGBOT_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(lingbot_session_start(engine_, nullptr, &session_), LINGBOT_OK);  // the defaults
}

TEST_F(CApi, WrongShapesAreErrors) {
  lingbot_session* s = start(1);
  std::vector<float> frame(3 * 56 * 70, 0.f);
  // Not three channels, or no pixels: refused before the engine sees it.
  EXPECT_EQ(lingbot_session_push(s, frame.data(), 1, 56, 70, nullptr, nullptr),
            LINGBOT_ERROR_INVALID_ARGUMENT);
  expect_one_line(lingbot_last_error());
  EXPECT_NE(std::string(lingbot_last_error()).find("[1, 56, 70]"), std::string::npos)
      << lingbot_last_error();
  EXPECT_EQ(lingbot_session_push(s, frame.data(), 3, 0, 70, nullptr, nullptr),
            LINGBOT_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(lingbot_session_push(s, nullptr, 3, 56, 70, nullptr, nullptr),
            LINGBOT_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(lingbot_session_push(nullptr, frame.data(), 3, 56, 70, nullptr, nullptr),
            LINGBOT_ERROR_INVALID_ARGUMENT);
  // Sides that are not multiples of the patch size: the model refuses.
  EXPECT_EQ(lingbot_session_push(s, frame.data(), 3, 50, 70, nullptr, nullptr),
            LINGBOT_ERROR_FAILED);
  expect_one_line(lingbot_last_error());
  EXPECT_NE(std::string(lingbot_last_error()).find("multiples of"), std::string::npos)
      << lingbot_last_error();
  // After a reset, a sequence that changes size part way.
  ASSERT_EQ(lingbot_session_reset(s), LINGBOT_OK);
  std::vector<CResult> got;
  ASSERT_EQ(lingbot_session_push(s, frame.data(), 3, 56, 70, collect_c, &got), LINGBOT_OK)
      << lingbot_last_error();
  EXPECT_EQ(lingbot_session_push(s, frame.data(), 3, 28, 28, collect_c, &got),
            LINGBOT_ERROR_FAILED);
  expect_one_line(lingbot_last_error());
  EXPECT_NE(std::string(lingbot_last_error()).find("one size"), std::string::npos)
      << lingbot_last_error();
  ASSERT_EQ(lingbot_session_finish(s, collect_c, &got), LINGBOT_OK) << lingbot_last_error();
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].r.index, 0);
  EXPECT_EQ(got[0].depth.size(), 56u * 70u);
}

TEST_F(CApi, NullSessionsAreRefusedAndFreeAcceptsNull) {
  EXPECT_EQ(lingbot_session_finish(nullptr, nullptr, nullptr), LINGBOT_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(lingbot_session_flush(nullptr, nullptr, nullptr), LINGBOT_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(lingbot_session_reset(nullptr), LINGBOT_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(lingbot_session_free(nullptr), LINGBOT_OK);
  EXPECT_EQ(lingbot_engine_free(nullptr), LINGBOT_OK);
}

// The message belongs to the thread whose call failed, and a later success keeps it.
TEST_F(CApi, TheLastErrorIsPerThreadAndKeptAcrossSuccesses) {
  lingbot_session* s = start(1);
  std::vector<float> frame(3 * 56 * 70, 0.f);
  EXPECT_EQ(lingbot_session_push(s, frame.data(), 2, 56, 70, nullptr, nullptr),
            LINGBOT_ERROR_INVALID_ARGUMENT);
  const std::string message = lingbot_last_error();
  EXPECT_EQ(lingbot_session_push(s, frame.data(), 3, 56, 70, nullptr, nullptr), LINGBOT_OK);
  EXPECT_EQ(lingbot_last_error(), message);
  std::string other = "unset";
  std::thread([&] { other = lingbot_last_error(); }).join();
  EXPECT_EQ(other, "");
}

// Saved through the C API after 9 frames and resumed on another engine: the rest of the
// sequence gives exactly the uninterrupted session's results; a bad file is a status and a line.
TEST_F(CApi, SaveAndResumeContinueExactly) {
  const std::vector<Tensor> frames = test::tiny_frames();
  const auto push = [](lingbot_session* s, const Tensor& f, std::vector<CResult>* out) {
    return lingbot_session_push(s, f.f32(), 3, static_cast<int>(f.dim(1)),
                                static_cast<int>(f.dim(2)), collect_c, out);
  };
  std::vector<CResult> want, got;
  lingbot_session* s = start(4);
  for (size_t i = 0; i < frames.size(); ++i) {
    if (i == 9) {
      ASSERT_EQ(lingbot_session_save(s, "c_api_resume.lbs"), LINGBOT_OK) << lingbot_last_error();
      got = want;
    }
    ASSERT_EQ(push(s, frames[i], &want), LINGBOT_OK) << lingbot_last_error();
  }
  ASSERT_EQ(lingbot_session_finish(s, collect_c, &want), LINGBOT_OK);

  lingbot_engine_options eo = lingbot_engine_default_options();
  eo.model = "synthetic:1";
  eo.arch = "tiny";
  lingbot_engine* other = nullptr;
  ASSERT_EQ(lingbot_engine_create(&eo, &other), LINGBOT_OK) << lingbot_last_error();
  lingbot_session* resumed = nullptr;
  ASSERT_EQ(lingbot_session_resume(other, "c_api_resume.lbs", &resumed), LINGBOT_OK)
      << lingbot_last_error();
  for (size_t i = 9; i < frames.size(); ++i)
    ASSERT_EQ(push(resumed, frames[i], &got), LINGBOT_OK) << lingbot_last_error();
  ASSERT_EQ(lingbot_session_finish(resumed, collect_c, &got), LINGBOT_OK);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(got[i].r.index, want[i].r.index);
    EXPECT_EQ(std::memcmp(got[i].r.pose_enc, want[i].r.pose_enc, sizeof want[i].r.pose_enc), 0);
    EXPECT_EQ(got[i].depth, want[i].depth) << i;
  }
  EXPECT_EQ(lingbot_session_free(resumed), LINGBOT_OK);

  lingbot_session* none = reinterpret_cast<lingbot_session*>(1);
  EXPECT_EQ(lingbot_session_resume(other, "no_such_snapshot.lbs", &none), LINGBOT_ERROR_FAILED);
  EXPECT_EQ(none, nullptr);
  expect_one_line(lingbot_last_error());
  EXPECT_NE(std::string(lingbot_last_error()).find("no_such_snapshot.lbs"), std::string::npos);
  EXPECT_EQ(lingbot_session_save(nullptr, "x.lbs"), LINGBOT_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(lingbot_session_resume(other, nullptr, &none), LINGBOT_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(lingbot_engine_free(other), LINGBOT_OK);
  std::remove("c_api_resume.lbs");
}

}  // namespace
}  // namespace lingbot
