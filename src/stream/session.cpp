#include "stream/session.h"

#include <cstring>

#include "lingbot/error.h"
#include "model/pose.h"

namespace lingbot {

StreamSession::StreamSession(Model& model, const StreamOptions& options)
    : model_(model), opt_(options) {
  LINGBOT_CHECK(opt_.scale_frames >= 1, "scale frames must be at least 1");
  LINGBOT_CHECK(opt_.window >= 1, "the window must hold at least 1 frame");
  LINGBOT_CHECK(opt_.camera_iterations >= 1, "camera iterations must be at least 1");
}

void StreamSession::reset() {
  pending_.clear();
  next_index_ = 0;
  scale_frames_ = 0;
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
    KVCacheConfig c = model_.kv_config(height_, width_, opt_.scale_frames, opt_.window);
    c.cross_frame_special = opt_.cross_frame_special;
    c.camera_only = opt_.camera_only;
    c.include_scale_frames = opt_.include_scale_frames;
    kv_ = std::make_unique<PagedKVCache>(model_.backend(), c);
    camera_.emplace(model_.make_camera_cache(opt_.camera_iterations));
  }
  if (scale_frames_ == 0) {  // phase 1 collects the scale frames
    pending_.push_back(image);
    if (static_cast<int>(pending_.size()) == opt_.scale_frames) finish(on_result);
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

void StreamSession::run(const std::vector<Tensor>& frames, bool keyframe,
                        const Callback& on_result) {
  const int64_t s = static_cast<int64_t>(frames.size());
  Tensor batch = Tensor::zeros({s, 3, height_, width_});
  for (int64_t f = 0; f < s; ++f)
    std::memcpy(batch.f32() + f * frames[f].numel(), frames[f].f32(), frames[f].nbytes());
  Model::Output out;
  try {
    out = model_.forward(batch, *kv_, *camera_, scale_frames_, keyframe, opt_.camera_iterations);
  } catch (...) {
    if (kv_->pending_frames()) kv_->reset();  // a failed step leaves no half-written state
    throw;
  }
  if (keyframe) {
    kv_->commit();
  } else {
    kv_->rollback_last_frame();
  }
  const int64_t plane = height_ * width_;
  for (int64_t f = 0; f < s; ++f) {
    FrameResult r;
    r.index = next_index_++;
    r.keyframe = keyframe;
    std::memcpy(r.pose_enc.data(), out.pose_enc.f32() + f * 9, 9 * sizeof(float));
    const CameraPose pose = decode_pose(r.pose_enc.data(), static_cast<int>(height_),
                                        static_cast<int>(width_));
    std::memcpy(r.c2w.data(), pose.c2w, sizeof(pose.c2w));
    std::memcpy(r.w2c.data(), pose.w2c, sizeof(pose.w2c));
    std::memcpy(r.intrinsics.data(), pose.K, sizeof(pose.K));
    r.height = static_cast<int>(height_);
    r.width = static_cast<int>(width_);
    r.depth.assign(out.depth.f32() + f * plane, out.depth.f32() + (f + 1) * plane);
    r.confidence.assign(out.conf.f32() + f * plane, out.conf.f32() + (f + 1) * plane);
    on_result(r);
  }
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
