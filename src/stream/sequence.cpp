#include "stream/sequence.h"

#include "lingbot/error.h"
#include "model/model.h"

namespace lingbot {

SequenceConfig sequence_config(const ModelConfig& m, int64_t height, int64_t width,
                               const StreamOptions& s) {
  SequenceConfig c;
  c.height = height;
  c.width = width;
  KVCacheConfig& kv = c.kv;
  kv.layers = m.depth;
  kv.heads = m.heads;
  kv.head_dim = m.head_dim();
  kv.special_tokens = ModelConfig::kSpecialTokens;
  kv.tokens_per_frame = kv.special_tokens + (height / m.patch) * (width / m.patch);
  kv.scale_frames = s.scale_frames;
  kv.window = s.window;
  kv.cross_frame_special = s.cross_frame_special;
  kv.camera_only = s.camera_only;
  kv.include_scale_frames = s.include_scale_frames;
  kv.max_special_frames = s.max_special_frames;
  kv.dtype = m.kv_fp8 ? DType::F8E4M3 : m.compute;
  c.camera_limit = camera_limit(s);
  c.camera_iterations = s.camera_iterations;
  c.descriptors = s.descriptors;
  return c;
}

CameraCacheLimit camera_limit(const StreamOptions& o) {
  if (o.max_special_frames <= 0) return {};
  // The camera head keeps the camera tokens of the frames the aggregator still sees in some
  // form: the scale frames, the window and the capped stream.
  return {.pinned = o.include_scale_frames ? o.scale_frames : 0,
          .recent = o.window + o.max_special_frames};
}

SequenceState::SequenceState(const Model& model, const SequenceConfig& config)
    : cfg_(config),
      kv_(model.backend(), config.kv),
      camera_(model.make_camera_cache(config.camera_iterations)) {
  camera_.set_limit(cfg_.camera_limit);
}

SequenceBytes SequenceState::bytes_for(const ModelConfig& model, const SequenceConfig& config,
                                       int64_t stored) {
  SequenceBytes b;
  b.kv = PagedKVCache::bytes_for(config.kv, stored);
  b.special_stream = b.kv - PagedKVCache::bytes_for(config.kv, 0);  // less the page pool
  b.camera =
      Model::camera_cache_bytes_for(model, config.camera_iterations, stored, config.camera_limit);
  return b;
}

void SequenceState::begin(int64_t frames, StepMode mode) {
  LINGBOT_CHECK(!open_, "a step began before the previous one was queued or decided");
  // Trimming waits for a step boundary, so that a tentative frame can still be rolled back.
  camera_.trim();
  camera_rows_ = camera_.rows();
  kv_.append(frames, mode != StepMode::Keep);
  if (scale_frames_ == 0) scale_frames_ = frames;
  mode_ = mode;
  open_ = true;
}

void SequenceState::queued() {
  LINGBOT_CHECK(open_, "queued() without a step");
  // The host's bookkeeping may move on while the device still runs the step: pages released
  // here are written again only by later steps, which the device runs after this one.
  if (mode_ == StepMode::Keep) kv_.commit();
  if (mode_ == StepMode::Attend) kv_.rollback_last_frame();
  if (mode_ != StepMode::Tentative) open_ = false;
}

void SequenceState::decide(bool keep) {
  LINGBOT_CHECK(open_ && mode_ == StepMode::Tentative && kv_.pending_frames() > 0,
                "decide() without a queued tentative step");
  if (keep) {
    kv_.commit();
  } else {
    kv_.rollback_last_frame();
    camera_.truncate(camera_rows_);
  }
  open_ = false;
}

void SequenceState::abort() {
  if (!open_) return;
  open_ = false;
  if (mode_ == StepMode::Keep) {
    // A keyframe's eviction may already have moved the oldest window frame's specials, which
    // cannot be put back: the sequence starts over rather than go on from a half-written state.
    kv_.reset();
    camera_.reset();
    scale_frames_ = 0;
    return;
  }
  // A deferred step moved nothing yet and is undone exactly.
  if (kv_.pending_frames()) kv_.rollback_last_frame();
  camera_.truncate(camera_rows_);
}

void SequenceState::reset() {
  LINGBOT_CHECK(queued_.empty(), "a sequence was reset with steps still queued");
  kv_.reset();
  camera_.reset();
  scale_frames_ = 0;
  open_ = false;
}

SequenceState::Slot& SequenceState::next_slot() {
  LINGBOT_CHECK(queued_.size() < slots_.size(), "two steps of this sequence are already queued");
  return slots_[next_slot_];
}

void SequenceState::push_queued() {
  queued_.push_back(next_slot_);
  next_slot_ = (next_slot_ + 1) % static_cast<int>(slots_.size());
}

SequenceState::Slot& SequenceState::oldest_queued() {
  LINGBOT_CHECK(!queued_.empty(), "no step of this sequence is queued");
  return slots_[queued_.front()];
}

void SequenceState::pop_queued() {
  queued_.pop_front();
}

}  // namespace lingbot
