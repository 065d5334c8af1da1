#include "stream/session.h"

#include <cmath>
#include <cstring>

#include "lingbot/error.h"
#include "model/pose.h"

namespace lingbot {

StreamSession::StreamSession(Model& model, const StreamOptions& options)
    : model_(model), opt_(options) {
  LINGBOT_CHECK(opt_.scale_frames >= 1, "scale frames must be at least 1");
  LINGBOT_CHECK(opt_.window >= 1, "the window must hold at least 1 frame");
  LINGBOT_CHECK(opt_.camera_iterations >= 1, "camera iterations must be at least 1");
  LINGBOT_CHECK(std::isfinite(opt_.flow_threshold) && opt_.flow_threshold >= 0,
                "the flow threshold must be a finite number of pixels >= 0 (0 = off)");
  LINGBOT_CHECK(opt_.max_non_keyframe_gap >= 1, "the maximum non-keyframe gap must be at least 1");
  policy_.threshold = opt_.flow_threshold;
  policy_.max_gap = opt_.max_non_keyframe_gap;
}

void StreamSession::reset() {
  pending_.clear();
  next_index_ = 0;
  scale_frames_ = 0;
  last_keyframe_ = -1;
  if (kv_) kv_->reset();
  if (camera_) camera_->reset();
}

void StreamSession::push(const Tensor& image, const Callback& on_result) {
  LINGBOT_CHECK(image.rank() == 3 && image.dim(0) == 3 && image.dtype() == DType::F32,
                "a frame must be F32 [3, H, W], got " + shape_str(image.shape()));
  if (!kv_ || height_ != image.dim(1) || width_ != image.dim(2)) {
    LINGBOT_CHECK(next_index_ == 0 && pending_.empty(),
                  "frame " + std::to_string(next_index_ + pending_.size()) + " is " +
                      std::to_string(image.dim(2)) + "x" + std::to_string(image.dim(1)) +
                      " but the sequence started at " + std::to_string(width_) + "x" +
                      std::to_string(height_) + "; all frames of a sequence must have one size");
    height_ = image.dim(1);
    width_ = image.dim(2);
    kv_ = std::make_unique<PagedKVCache>(model_.backend(),
                                         kv_cache_config(model_.config(), height_, width_, opt_));
    camera_.emplace(model_.make_camera_cache(opt_.camera_iterations));
  }
  if (scale_frames_ == 0) {  // phase 1 collects the scale frames
    pending_.push_back(image);
    if (static_cast<int>(pending_.size()) == opt_.scale_frames) finish(on_result);
    return;
  }
  if (adaptive()) {
    run_adaptive(image, on_result);
    return;
  }
  const bool key = is_keyframe(next_index_, scale_frames_, opt_.keyframe_interval);
  run({image}, key, on_result);
}

void StreamSession::finish(const Callback& on_result) {
  if (pending_.empty()) return;
  scale_frames_ = static_cast<int64_t>(pending_.size());
  std::vector<Tensor> frames;
  frames.swap(pending_);
  run(frames, true, on_result);
}

Model::Output StreamSession::forward(const std::vector<Tensor>& frames, Model::Step step) {
  const int64_t s = static_cast<int64_t>(frames.size());
  Tensor batch = Tensor::zeros({s, 3, height_, width_});
  for (int64_t f = 0; f < s; ++f)
    std::memcpy(batch.f32() + f * frames[f].numel(), frames[f].f32(), frames[f].nbytes());
  const int64_t camera_rows = camera_->rows();
  try {
    return model_.forward(batch, *kv_, *camera_, scale_frames_, step, opt_.camera_iterations);
  } catch (...) {
    if (kv_->pending_frames()) kv_->reset();  // a failed step leaves no half-written state
    camera_->truncate(camera_rows);
    throw;
  }
}

FrameResult StreamSession::make_result(const Model::Output& out, int64_t f) {
  const int64_t plane = height_ * width_;
  FrameResult r;
  r.index = next_index_++;
  std::memcpy(r.pose_enc.data(), out.pose_enc.f32() + f * 9, 9 * sizeof(float));
  const CameraPose pose =
      decode_pose(r.pose_enc.data(), static_cast<int>(height_), static_cast<int>(width_));
  std::memcpy(r.c2w.data(), pose.c2w, sizeof(pose.c2w));
  std::memcpy(r.w2c.data(), pose.w2c, sizeof(pose.w2c));
  std::memcpy(r.intrinsics.data(), pose.K, sizeof(pose.K));
  r.height = static_cast<int>(height_);
  r.width = static_cast<int>(width_);
  r.depth.assign(out.depth.f32() + f * plane, out.depth.f32() + (f + 1) * plane);
  r.confidence.assign(out.conf.f32() + f * plane, out.conf.f32() + (f + 1) * plane);
  return r;
}

void StreamSession::note_keyframe(const FrameResult& r) {
  last_keyframe_ = r.index;
  key_c2w_ = r.c2w;
  key_K_ = r.intrinsics;
}

void StreamSession::run(const std::vector<Tensor>& frames, bool keyframe,
                        const Callback& on_result) {
  const Model::Output out =
      forward(frames, {.defer_eviction = !keyframe, .store_camera = keyframe});
  if (keyframe) {
    kv_->commit();
  } else {
    kv_->rollback_last_frame();
  }
  for (int64_t f = 0; f < static_cast<int64_t>(frames.size()); ++f) {
    FrameResult r = make_result(out, f);
    r.keyframe = keyframe;
    if (keyframe) note_keyframe(r);
    on_result(r);
  }
}

void StreamSession::run_adaptive(const Tensor& image, const Callback& on_result) {
  // Whether to keep the frame depends on its own depth and pose, so the pass stores it in both
  // caches with the window's eviction held back until the decision.
  const Model::Output out = forward({image}, {.defer_eviction = true, .store_camera = true});
  FrameResult r = make_result(out, 0);
  const bool first = r.index == scale_frames_;
  const bool forced = policy_.forced(first, r.index, last_keyframe_);
  const double flow = forced ? 0.0 : flow_magnitude(r, key_c2w_, key_K_);
  r.keyframe = policy_.is_keyframe(first, flow, r.index, last_keyframe_);
  if (r.keyframe) {
    kv_->commit();
    note_keyframe(r);
  } else {
    kv_->rollback_last_frame();
    // Deliberate departure from the reference, which has no camera-head rollback and so leaves
    // every non-keyframe's camera token in that cache (spec 03 §6.4). Dropping it makes a
    // non-keyframe cost nothing later, as under the fixed interval.
    camera_->rollback_last_frame();
  }
  on_result(r);
}

CacheStats StreamSession::cache_stats() const {
  CacheStats s;
  if (!kv_) return s;
  const KVCacheStats k = kv_->stats();
  s.stored_frames = k.stored_frames;
  s.scale_pages = k.scale_pages;
  s.live_pages = k.live_pages;
  s.free_pages = k.free_pages;
  s.special_tokens = k.special_tokens;
  s.bytes = k.bytes_in_use;
  s.bytes_reserved = k.bytes_reserved;
  s.layers = kv_->config().layers;
  return s;
}

}  // namespace lingbot
