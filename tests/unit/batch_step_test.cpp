// One model step over several sequences (Model::enqueue of parts): each sequence gets what it
// gets in steps of its own. Each sequence attends over its own keys and every other op works
// row by row, but not bit for bit on the CPU: OpenBLAS's sgemm rounds a row differently with
// the row count of the call (its kernels for the edge tiles and for small products sum in
// another order), so a frame's rows in a batch of 4 differ from those in its own step by about
// 1e-6 relative. The check is the sessions' 1e-5, tighter than the fixtures' float32 1e-4.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "backend/ops.h"
#include "lingbot/error.h"
#include "model/model.h"
#include "stream/sequence.h"
#include "stream/session.h"
#include "test_util.h"
#include "tiny_frames.h"

namespace lingbot {
namespace {

// One sequence's plan: its frames, options, and how its streamed frames are stepped (a fixed
// keyframe interval, or every frame tentative and kept when `keep_tentative` says so).
struct Plan {
  std::vector<Tensor> frames;
  StreamOptions options;
  bool tentative = false;
  bool keep_tentative(size_t t) const { return t % 3 != 1; }
  StepMode mode(size_t t) const {
    if (tentative) return StepMode::Tentative;
    return StreamSession::is_keyframe(static_cast<int64_t>(t), options.scale_frames,
                                      options.keyframe_interval)
               ? StepMode::Keep
               : StepMode::Attend;
  }
};

// The outputs of a sequence, step by step, as plain floats.
struct Outputs {
  std::vector<float> pose, depth, conf;
  void add(const Model::Output& o) {
    pose.insert(pose.end(), o.pose_enc.f32(), o.pose_enc.f32() + o.pose_enc.numel());
    depth.insert(depth.end(), o.depth.f32(), o.depth.f32() + o.depth.numel());
    conf.insert(conf.end(), o.conf.f32(), o.conf.f32() + o.conf.numel());
  }
};

std::unique_ptr<SequenceState> start(Model& model, const Plan& plan) {
  const Tensor& f = plan.frames[0];
  return std::make_unique<SequenceState>(
      model, sequence_config(model.config(), f.dim(1), f.dim(2), plan.options));
}

// Collects the step of frame t of `plan` on `seq` and settles a tentative one.
void finish_step(Model& model, SequenceState& seq, const Plan& plan, size_t t, Outputs& out) {
  out.add(model.collect(seq));
  if (plan.tentative) seq.decide(plan.keep_tentative(t));
}

Outputs run_alone(Model& model, const Plan& plan) {
  auto seq = start(model, plan);
  Outputs out;
  const size_t scale = plan.options.scale_frames;
  out.add(model.run(*seq, test::stack_frames(plan.frames, 0, scale), StepMode::Keep));
  for (size_t t = scale; t < plan.frames.size(); ++t) {
    model.enqueue(*seq, test::stack_frames(plan.frames, t, t + 1), plan.mode(t));
    finish_step(model, *seq, plan, t, out);
  }
  return out;
}

constexpr double kTol = 1e-5;

// Largest absolute error over largest absolute reference value, as the fixtures measure.
void expect_close(const std::vector<float>& got, const std::vector<float>& want,
                  const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double err = 0, ref = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    err = std::max(err, static_cast<double>(std::fabs(got[i] - want[i])));
    ref = std::max(ref, static_cast<double>(std::fabs(want[i])));
  }
  EXPECT_LE(ref > 0 ? err / ref : err, kTol) << what;
}

void expect_close(const Outputs& got, const Outputs& want, const std::string& what) {
  expect_close(got.pose, want.pose, what + " pose");
  expect_close(got.depth, want.depth, what + " depth");
  expect_close(got.conf, want.conf, what + " confidence");
}

// Four sequences of different lengths, windows, scale blocks and keyframe rules, stepped
// together frame by frame once each has run its phase 1 alone.
std::vector<Plan> four_plans() {
  const std::vector<Tensor> frames = test::tiny_frames();
  std::vector<Plan> plans(4);
  for (size_t i = 0; i < plans.size(); ++i) {
    // Each sequence starts at another frame, so that no two see the same input at a step.
    for (size_t t = 0; t < frames.size(); ++t)
      plans[i].frames.push_back(frames[(t + 3 * i) % frames.size()]);
  }
  plans[0].options = {.scale_frames = 4, .window = 6};
  plans[1].options = {.scale_frames = 3, .window = 4, .keyframe_interval = 2};
  plans[1].frames.resize(11);
  plans[2].options = {.scale_frames = 2, .window = 3, .keyframe_interval = 3};
  plans[2].frames.resize(14);
  plans[3].options = {.scale_frames = 3, .window = 5};
  plans[3].tentative = true;
  plans[3].frames.resize(9);
  return plans;
}

TEST(BatchStep, SequencesSteppedTogetherGetTheirResultsAlone) {
  auto backend = make_cpu_backend();
  WeightLoader weights(1, *backend);
  Model model(*backend, weights, ModelConfig::preset("tiny"));
  const std::vector<Plan> plans = four_plans();
  ASSERT_EQ(plans[0].frames.size(), 16u);

  std::vector<Outputs> alone;
  for (const Plan& plan : plans) alone.push_back(run_alone(model, plan));

  std::vector<std::unique_ptr<SequenceState>> seqs;
  std::vector<Outputs> batched(plans.size());
  std::vector<size_t> next(plans.size());
  for (size_t i = 0; i < plans.size(); ++i) {
    seqs.push_back(start(model, plans[i]));
    const size_t scale = plans[i].options.scale_frames;
    batched[i].add(
        model.run(*seqs[i], test::stack_frames(plans[i].frames, 0, scale), StepMode::Keep));
    next[i] = scale;
  }
  int steps = 0;
  for (;;) {
    std::vector<Model::Part> parts;
    std::vector<size_t> who;
    for (size_t i = 0; i < plans.size(); ++i) {
      if (next[i] >= plans[i].frames.size()) continue;
      parts.push_back({seqs[i].get(), test::stack_frames(plans[i].frames, next[i], next[i] + 1),
                       plans[i].mode(next[i])});
      who.push_back(i);
    }
    if (parts.empty()) break;
    model.enqueue(parts);
    ++steps;
    for (size_t i : who) finish_step(model, *seqs[i], plans[i], next[i]++, batched[i]);
  }
  EXPECT_EQ(steps, 12);  // as many as the longest stream has: 16 frames less 4 scale frames
  for (size_t i = 0; i < plans.size(); ++i)
    expect_close(batched[i], alone[i], "sequence " + std::to_string(i));
}

TEST(BatchStep, ARefusedBatchLeavesEverySequenceAsItWas) {
  auto backend = make_cpu_backend();
  WeightLoader weights(1, *backend);
  Model model(*backend, weights, ModelConfig::preset("tiny"));
  std::vector<Plan> plans = four_plans();
  plans.resize(2);
  const Outputs alone_a = run_alone(model, plans[0]), alone_b = run_alone(model, plans[1]);
  auto a = start(model, plans[0]), b = start(model, plans[1]);
  Outputs got_a, got_b;
  got_a.add(model.run(*a, test::stack_frames(plans[0].frames, 0, 4), StepMode::Keep));
  got_b.add(model.run(*b, test::stack_frames(plans[1].frames, 0, 3), StepMode::Keep));
  // Refused before anything runs: two frames of one sequence beside another sequence, a
  // sequence twice, frames of another size.
  const Tensor one_a = test::stack_frames(plans[0].frames, 4, 5),
               one_b = test::stack_frames(plans[1].frames, 3, 4);
  EXPECT_THROW(
      model.enqueue({{a.get(), one_a, StepMode::Keep},
                     {b.get(), test::stack_frames(plans[1].frames, 3, 5), StepMode::Keep}}),
      Error);
  EXPECT_THROW(model.enqueue({{a.get(), one_a, StepMode::Keep}, {a.get(), one_a, StepMode::Keep}}),
               Error);
  EXPECT_THROW(model.enqueue({{a.get(), one_a, StepMode::Keep},
                              {b.get(), Tensor::zeros({1, 3, 28, 42}), StepMode::Keep}}),
               Error);
  model.enqueue({{a.get(), one_a, StepMode::Keep}, {b.get(), one_b, plans[1].mode(3)}});
  got_a.add(model.collect(*a));
  got_b.add(model.collect(*b));
  // The prefix of each alone run that the steps above cover.
  auto prefix = [](Outputs o, const Outputs& like) {
    o.pose.resize(like.pose.size());
    o.depth.resize(like.depth.size());
    o.conf.resize(like.conf.size());
    return o;
  };
  expect_close(got_a, prefix(alone_a, got_a), "A");
  expect_close(got_b, prefix(alone_b, got_b), "B");
}

}  // namespace
}  // namespace lingbot
