#include "stream/session.h"

#include <cmath>
#include <cstring>

#include "lingbot/error.h"
#include "model/pose.h"
#include "stream/result_camera.h"

namespace lingbot {

StreamSession::StreamSession(Model& model, StepScheduler& scheduler, const StreamOptions& options,
                             std::shared_future<std::string> weights)
    : model_(model),
      scheduler_(scheduler),
      opt_(options),
      keyframes_({.threshold = options.flow_threshold, .max_gap = options.max_non_keyframe_gap}),
      weights_(std::move(weights)) {
  // The thread that starts a session usually pushes its frames: its CPU threads are bounded
  // from here on, the preprocessing of its frames included.
  model_.backend().use_on_this_thread();
  LINGBOT_CHECK_ARG(opt_.scale_frames >= 1, "scale frames must be at least 1");
  LINGBOT_CHECK_ARG(opt_.window >= 1, "the window must hold at least 1 frame");
  LINGBOT_CHECK_ARG(opt_.camera_iterations >= 1, "camera iterations must be at least 1");
  LINGBOT_CHECK_ARG(std::isfinite(opt_.flow_threshold) && opt_.flow_threshold >= 0,
                    "the flow threshold must be a finite number of pixels >= 0 (0 = off)");
  LINGBOT_CHECK_ARG(opt_.max_non_keyframe_gap >= 1,
                    "the maximum non-keyframe gap must be at least 1");
  LINGBOT_CHECK_ARG(opt_.max_special_frames >= 0,
                    "the special-frame cap must be a number of frames >= 0 (0 = unbounded)");
}

StreamSession::~StreamSession() {
  model_.backend().use_on_this_thread();  // the caches are freed on this thread too
  // A step still on the device must leave the model's queue, or the next session would collect it.
  if (in_flight_) {
    try {
      model_.collect(*seq_);
    } catch (...) {
    }
  }
}

void StreamSession::reset() {
  model_.backend().use_on_this_thread();
  if (in_flight_) {
    in_flight_.reset();
    model_.collect(*seq_);  // its results are dropped with the sequence
  }
  pending_.clear();
  held_.clear();
  cameras_.clear();
  next_index_ = 0;
  keyframes_.reset();
  if (seq_) seq_->reset();
}

void StreamSession::push(const Tensor& image, const Callback& on_result) {
  model_.backend().use_on_this_thread();  // each session may be pushed from a thread of its own
  LINGBOT_CHECK_ARG(image.rank() == 3 && image.dim(0) == 3 && image.dtype() == DType::F32,
                    "a frame must be F32 [3, H, W], got " + shape_str(image.shape()));
  const int64_t index = next_index_ + (in_flight_ ? in_flight_->frames : 0);
  const int64_t h = image.dim(1), w = image.dim(2);
  if (!seq_ || seq_->config().height != h || seq_->config().width != w) {
    LINGBOT_CHECK_ARG(index == 0 && pending_.empty(),
                      "frame " + std::to_string(index + pending_.size()) + " is " +
                          std::to_string(image.dim(2)) + "x" + std::to_string(image.dim(1)) +
                          " but the sequence started at " +
                          std::to_string(seq_ ? seq_->config().width : 0) + "x" +
                          std::to_string(seq_ ? seq_->config().height : 0) +
                          "; all frames of a sequence must have one size");
    seq_.reset();  // the old caches go before the new ones are allocated
    seq_ = std::make_unique<SequenceState>(model_, sequence_config(model_.config(), h, w, opt_));
  }
  if (seq_->scale_frames() == 0) {  // phase 1 collects the scale frames
    pending_.push_back(image);
    if (static_cast<int>(pending_.size()) == opt_.scale_frames) finish(on_result);
    return;
  }
  if (adaptive()) {
    run_adaptive(image, on_result);
    return;
  }
  const bool key = is_keyframe(index, seq_->scale_frames(), opt_.keyframe_interval);
  run({image}, key, on_result);
}

void StreamSession::finish(const Callback& on_result) {
  model_.backend().use_on_this_thread();
  deliver_in_flight(on_result);
  if (pending_.empty()) return;
  std::vector<Tensor> frames;
  frames.swap(pending_);
  run(frames, true, on_result);
}

void StreamSession::flush(const Callback& on_result) {
  model_.backend().use_on_this_thread();
  deliver_in_flight(on_result);
}

void StreamSession::submit(const std::vector<Tensor>& frames, StepMode mode) {
  const int64_t s = static_cast<int64_t>(frames.size());
  Tensor batch = Tensor::zeros({s, 3, seq_->config().height, seq_->config().width});
  for (int64_t f = 0; f < s; ++f)
    std::memcpy(batch.f32() + f * frames[f].numel(), frames[f].f32(), frames[f].nbytes());
  scheduler_.enqueue(*seq_, batch, mode);
}

FrameResult StreamSession::make_result(const Model::Output& out, int64_t f) {
  const int h = static_cast<int>(seq_->config().height), w = static_cast<int>(seq_->config().width);
  const int64_t plane = static_cast<int64_t>(h) * w;
  FrameResult r;
  r.index = next_index_++;
  r.scale_frame = r.index < seq_->scale_frames();
  std::memcpy(r.pose_enc.data(), out.pose_enc.f32() + f * 9, 9 * sizeof(float));
  set_camera_from_pose_enc(r, h, w);
  r.depth.assign(out.depth.f32() + f * plane, out.depth.f32() + (f + 1) * plane);
  r.confidence.assign(out.conf.f32() + f * plane, out.conf.f32() + (f + 1) * plane);
  if (out.descriptor.defined()) {
    const int64_t n = out.descriptor.dim(1);
    r.descriptor.assign(out.descriptor.f32() + f * n, out.descriptor.f32() + (f + 1) * n);
  }
  return r;
}

void StreamSession::run(const std::vector<Tensor>& frames, bool keyframe,
                        const Callback& on_result) {
  if (frames.size() > 1) deliver_in_flight(on_result);  // phase 1 runs alone
  submit(frames, keyframe ? StepMode::Keep : StepMode::Attend);
  InFlight next{static_cast<int64_t>(frames.size()), keyframe, CacheStats{}};
  next.stats = cache_stats();
  deliver_in_flight(on_result);  // the previous step, finished while this one was being queued
  in_flight_ = next;
  // Phase 1 runs alone; and a backend that computes as it is called has the outputs ready now,
  // so they go out within this push (nothing runs beside the host to overlap with).
  if (frames.size() > 1 || !model_.backend().queues_work()) deliver_in_flight(on_result);
}

void StreamSession::collect_in_flight() {
  if (!in_flight_) return;
  const InFlight f = *in_flight_;
  in_flight_.reset();
  const Model::Output out = model_.collect(*seq_);
  for (int64_t i = 0; i < f.frames; ++i) {
    FrameResult r = make_result(out, i);
    r.keyframe = f.keyframe;
    if (f.keyframe) keyframes_.keep(r);
    record(r);
    held_.push_back(std::move(r));
  }
  held_stats_ = f.stats;
}

void StreamSession::deliver_in_flight(const Callback& on_result) {
  collect_in_flight();
  if (held_.empty()) return;
  std::vector<FrameResult> out;
  out.swap(held_);
  delivering_ = held_stats_;
  struct Clear {
    std::optional<CacheStats>& s;
    ~Clear() { s.reset(); }
  } clear{delivering_};
  for (const FrameResult& r : out) on_result(r);
}

void StreamSession::record(const FrameResult& r) {
  Camera c{r.index, r.pose_enc, 0};
  c.flags = (r.keyframe ? kCameraKeyframe : 0) | (r.scale_frame ? kCameraScaleFrame : 0);
  cameras_.push_back(c);
}

std::vector<FrameResult> StreamSession::trajectory() const {
  std::vector<FrameResult> out;
  if (!seq_) return out;
  const int h = static_cast<int>(seq_->config().height), w = static_cast<int>(seq_->config().width);
  out.reserve(cameras_.size());
  for (const Camera& c : cameras_) {
    FrameResult r;
    r.index = c.index;
    r.keyframe = c.flags & kCameraKeyframe;
    r.scale_frame = c.flags & kCameraScaleFrame;
    r.pose_enc = c.pose_enc;
    set_camera_from_pose_enc(r, h, w);  // as the delivered result's, bit for bit
    out.push_back(std::move(r));
  }
  return out;
}

void StreamSession::run_adaptive(const Tensor& image, const Callback& on_result) {
  deliver_in_flight(on_result);
  // Whether to keep the frame depends on its own depth and pose, so the pass stores it in both
  // caches with the window's eviction held back until the decision.
  submit({image}, StepMode::Tentative);
  const Model::Output out = model_.collect(*seq_);
  FrameResult r = make_result(out, 0);
  r.keyframe = keyframes_.decide(r, r.index == seq_->scale_frames());
  // A non-keyframe leaves both caches. Deliberately unlike the reference, which has no
  // camera-head rollback and so keeps every non-keyframe's camera token in that cache: dropping
  // it makes a non-keyframe cost nothing later, as under the fixed interval.
  seq_->decide(r.keyframe);
  record(r);
  on_result(r);
}

CacheStats StreamSession::cache_stats() const {
  if (delivering_) return *delivering_;
  CacheStats s;
  if (!seq_) return s;
  const KVCacheStats k = seq_->kv().stats();
  s.stored_frames = k.stored_frames;
  s.scale_pages = k.scale_pages;
  s.live_pages = k.live_pages;
  s.free_pages = k.free_pages;
  s.special_tokens = k.special_tokens;
  s.bytes = k.bytes_in_use;
  s.bytes_reserved = k.bytes_reserved;
  s.layers = seq_->kv().config().layers;
  s.special_frames = k.stream_frames;
  s.special_bytes = k.stream_bytes_in_use;
  s.special_bytes_reserved = k.stream_bytes_reserved;
  s.camera_cache_bytes = seq_->camera().bytes_in_use();
  s.camera_cache_bytes_reserved = seq_->camera().bytes_reserved();
  return s;
}

}  // namespace lingbot
