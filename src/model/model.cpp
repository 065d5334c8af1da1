#include "model/model.h"

#include "lingbot/error.h"
#include "util/profile.h"

namespace lingbot {

Tensor normalize_imagenet(const Tensor& images01) {
  static constexpr float kMean[3] = {0.485f, 0.456f, 0.406f};
  static constexpr float kStd[3] = {0.229f, 0.224f, 0.225f};
  Tensor out = Tensor::zeros(images01.shape());
  const int64_t plane = images01.dim(2) * images01.dim(3);
  const float* in = images01.f32();
  for (int64_t i = 0; i < images01.numel(); ++i) {
    const int64_t c = (i / plane) % 3;
    out.f32()[i] = (in[i] - kMean[c]) / kStd[c];
  }
  return out;
}

Model::Model(Backend& backend, WeightLoader& weights, const ModelConfig& config)
    : backend_(backend), cfg_(config) {
  aggregator_.load(weights, cfg_);
  CameraHeadConfig cam;
  cam.dim_in = cam.dim = 2 * cfg_.dim;
  cam.heads = cfg_.camera_heads;
  camera_.load(weights, cam);
  DepthHeadConfig dpt;
  dpt.dim_in = 2 * cfg_.dim;
  dpt.features = cfg_.dpt_features;
  dpt.out_channels = cfg_.dpt_out;
  dpt.patch = static_cast<int>(cfg_.patch);
  depth_.load(weights, dpt);
  weights.finish();
  // The reference runs its depth head's convolutions on TF32 tensor cores (PyTorch's cuDNN
  // default); the reduced-precision mode does the same, the float32 mode stays exact.
  backend_.allow_tf32_convolutions(cfg_.compute != DType::F32);
}

KVCacheConfig kv_cache_config(const ModelConfig& m, int64_t height, int64_t width,
                              const StreamOptions& s) {
  KVCacheConfig c;
  c.layers = m.depth;
  c.heads = m.heads;
  c.head_dim = m.head_dim();
  c.special_tokens = ModelConfig::kSpecialTokens;
  c.tokens_per_frame = c.special_tokens + (height / m.patch) * (width / m.patch);
  c.scale_frames = s.scale_frames;
  c.window = s.window;
  c.cross_frame_special = s.cross_frame_special;
  c.camera_only = s.camera_only;
  c.include_scale_frames = s.include_scale_frames;
  c.dtype = m.compute;
  return c;
}

CameraCache Model::make_camera_cache(int iterations) const {
  return camera_.make_cache(backend_, iterations, DType::F32);
}

Model::Output Model::forward(const Tensor& images01, PagedKVCache& kv, CameraCache& camera,
                             int64_t scale_frames, bool store, int camera_iterations) {
  return forward(images01, kv, camera, scale_frames,
                 Step{.defer_eviction = !store, .store_camera = store}, camera_iterations);
}

Model::Output Model::forward(const Tensor& images01, PagedKVCache& kv, CameraCache& camera,
                             int64_t scale_frames, Step step, int camera_iterations) {
  const int64_t s = images01.dim(0), h = images01.dim(2), w = images01.dim(3);
  LINGBOT_CHECK(images01.rank() == 4 && images01.dim(1) == 3 && h % cfg_.patch == 0 &&
                    w % cfg_.patch == 0,
                "frames must be [S, 3, H, W] with H and W multiples of " +
                    std::to_string(cfg_.patch) + ", got " + shape_str(images01.shape()));
  Tensor images = backend_.upload(normalize_imagenet(images01), DType::F32);
  layers_ = &aggregator_.forward(backend_, images, kv, scale_frames, step.defer_eviction);
  const auto& layers = *layers_;
  // The camera head reads token 0 (the camera token) of the last emitted layer.
  const int64_t c2 = layers[3].dim(2);
  if (!cam_tokens_.defined() || cam_tokens_.dim(0) != s) cam_tokens_ = backend_.alloc({s, c2}, DType::F32);
  for (int64_t f = 0; f < s; ++f) {
    Tensor dst = cam_tokens_[f];
    backend_.copy(layers[3][f].slice(0, 1), dst);
  }
  Output out;
  {
    ProfileScope ps(backend_, "camera head");
    out.pose_enc =
        camera_.forward(backend_, cam_tokens_, camera, step.store_camera, camera_iterations);
  }
  ProfileScope ps(backend_, "depth head");
  DepthOutput d = depth_.forward(backend_, layers, static_cast<int>(h), static_cast<int>(w));
  out.depth = d.depth;
  out.conf = d.conf;
  return out;
}

}  // namespace lingbot
