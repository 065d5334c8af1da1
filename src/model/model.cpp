#include "model/model.h"

#include <algorithm>

#include "backend/scratch.h"
#include "lingbot/error.h"
#include "util/profile.h"

namespace lingbot {

namespace {

constexpr float kMean[3] = {0.485f, 0.456f, 0.406f};
constexpr float kStd[3] = {0.229f, 0.224f, 0.225f};

// images01 [S, 3, H, W] in [0, 1] -> (x - mean) / std with ImageNet's constants, into `out`.
// Plane by plane: the channel comes from the loop, not from a division per pixel.
void normalize_into(const Tensor& images01, float* out) {
  const int64_t plane = images01.dim(2) * images01.dim(3), planes = images01.numel() / plane;
  const float* in = images01.f32();
  for (int64_t p = 0; p < planes; ++p) {
    const float mean = kMean[p % 3], sd = kStd[p % 3];
    const float* src = in + p * plane;
    float* dst = out + p * plane;
    for (int64_t i = 0; i < plane; ++i) dst[i] = (src[i] - mean) / sd;
  }
}

}  // namespace

Model::Model(Backend& backend, WeightLoader& weights, const ModelConfig& config)
    : backend_(backend), cfg_(config) {
  aggregator_.load(weights, cfg_);
  camera_.load(weights, camera_head_config(cfg_));
  depth_.load(weights, depth_head_config(cfg_));
  weights.finish();
  // The reference runs its depth head's convolutions on TF32 tensor cores (PyTorch's cuDNN
  // default); the reduced-precision mode goes one step further (bf16 inputs for the 3x3
  // kernels), the float32 mode stays exact.
  backend_.allow_fast_convolutions(cfg_.compute != DType::F32);
}

CameraCache Model::make_camera_cache(int iterations) const {
  return camera_.make_cache(backend_, iterations, kCameraCacheDtype);
}

CameraHeadConfig Model::camera_head_config(const ModelConfig& config) {
  CameraHeadConfig cam;
  cam.dim_in = cam.dim = 2 * config.dim;
  cam.heads = config.camera_heads;
  cam.matrices = config.compute;
  return cam;
}

DepthHeadConfig Model::depth_head_config(const ModelConfig& config) {
  DepthHeadConfig dpt;
  dpt.dim_in = 2 * config.dim;
  dpt.features = config.dpt_features;
  dpt.out_channels = config.dpt_out;
  dpt.patch = static_cast<int>(config.patch);
  return dpt;
}

ParamCount Model::parameters(const ModelConfig& config) {
  ParamCount n = Aggregator::parameters(config);
  n += CameraHead::parameters(camera_head_config(config));
  n += DepthHead::parameters(depth_head_config(config));
  return n;
}

size_t Model::work_bytes_for(const ModelConfig& config, int64_t height, int64_t width,
                             int64_t first_step_frames) {
  const int64_t s1 = std::max<int64_t>(first_step_frames, 1);
  const DepthHeadConfig dpt = depth_head_config(config);
  size_t b = 0;
  for (int64_t s : {s1, int64_t{1}}) {
    b += Aggregator::work_bytes_for(config, s, height, width);
    b += static_cast<size_t>(s * 3 * height * width) * 4;  // the normalized frames
  }
  // The camera head keeps one scratch, sized for the larger call, and its input tokens.
  b += CameraHead::scratch_bytes_for(camera_head_config(config), s1, kCameraCacheDtype);
  b += static_cast<size_t>(s1 * 2 * config.dim) * 4;
  b += DepthHead::plan_bytes_for(dpt, height, width);
  // The backend's grow-only scratch block holds its largest request: a depth-head convolution
  // or the split attention of a streamed frame. And the GEMM workspace.
  const int64_t tokens =
      ModelConfig::kSpecialTokens + (height / config.patch) * (width / config.patch);
  b += std::max(
      DepthHead::scratch_bytes_for(dpt, height, width),
      static_cast<size_t>(scratch::attention_floats(tokens, config.heads, config.head_dim())) * 4);
  return b + scratch::kGemmWorkspaceBytes;
}

size_t Model::camera_cache_bytes_for(const ModelConfig& config, int iterations, int64_t frames,
                                     const CameraCacheLimit& limit) {
  return CameraHead::cache_bytes_for(camera_head_config(config), iterations, kCameraCacheDtype,
                                     frames, limit);
}

Model::Output Model::run(SequenceState& seq, const Tensor& images01, StepMode mode) {
  LINGBOT_CHECK(seq.steps_queued() == 0, "Model::run while steps of the sequence are queued");
  enqueue(seq, images01, mode);
  return collect(seq);
}

void Model::enqueue(SequenceState& seq, const Tensor& images01, StepMode mode) {
  const int64_t s = images01.dim(0), h = images01.dim(2), w = images01.dim(3);
  LINGBOT_CHECK(
      images01.rank() == 4 && images01.dim(1) == 3 && h % cfg_.patch == 0 && w % cfg_.patch == 0,
      "frames must be [S, 3, H, W] with H and W multiples of " + std::to_string(cfg_.patch) +
          ", got " + shape_str(images01.shape()));
  LINGBOT_CHECK(h == seq.config().height && w == seq.config().width,
                "frames of " + std::to_string(w) + "x" + std::to_string(h) +
                    " on a sequence sized for " + std::to_string(seq.config().width) + "x" +
                    std::to_string(seq.config().height));
  LINGBOT_CHECK(!seq.step_open(), "a step began before the previous one was decided");
  SequenceState::Slot& slot = seq.next_slot();
  // Grow the slot's host buffers only when a step needs more (phase 1 is the largest).
  if (slot.input.numel() < s * 3 * h * w) {
    slot.input = backend_.alloc_host({s * 3 * h * w});
    slot.depth = backend_.alloc_host({s * h * w});
    slot.conf = backend_.alloc_host({s * h * w});
  }
  if (slot.pose.numel() < s * 9) slot.pose = backend_.alloc_host({s * 9});
  slot.frames = s;
  normalize_into(images01, slot.input.f32());

  std::lock_guard<std::mutex> lock(mu_);
  if (!slot.images.defined() || slot.images.shape() != Shape{s, 3, h, w})
    slot.images = backend_.alloc({s, 3, h, w}, DType::F32);
  // The device work of the step is recorded and replayed as a whole where the backend can: not
  // while profiling (its scopes wait for the device), and not for the first step of a new
  // shape, whose buffers are still being allocated (from the device's pool, not inside the
  // recording).
  const Shape shape{s, 3, h, w};
  if (shape != last_shape_) aggregator_.release_buffers();  // freed in stream order
  backend_.begin_step(!Profile::enabled() && shape == last_shape_);
  last_shape_ = shape;
  // The one place a failed step is undone: the backend drops what it recorded, the sequence
  // what the step stored.
  try {
    seq.begin(s, mode);
    backend_.upload_into(slot.input.slice(0, s * 3 * h * w).reshape({s, 3, h, w}), slot.images);
    layers_ = &aggregator_.enqueue(backend_, slot.images, seq.kv(), seq.scale_frames());
    const auto& layers = *layers_;
    // The camera head reads token 0 (the camera token) of the last emitted layer.
    const int64_t c2 = layers[3].dim(2);
    if (!cam_tokens_.defined() || cam_tokens_.dim(0) != s)
      cam_tokens_ = backend_.alloc({s, c2}, DType::F32);
    for (int64_t f = 0; f < s; ++f) {
      Tensor dst = cam_tokens_[f];
      backend_.copy(layers[3][f].slice(0, 1), dst);
    }
    {
      ProfileScope ps(backend_, "camera head");
      const Tensor& pose = camera_.enqueue(backend_, cam_tokens_, seq.camera(), seq.stores_camera(),
                                           seq.config().camera_iterations);
      backend_.download_async(pose, slot.pose.f32());
    }
    {
      ProfileScope ps(backend_, "depth head");
      depth_.enqueue(backend_, layers, static_cast<int>(h), static_cast<int>(w), slot.depth.f32(),
                     slot.conf.f32());
    }
    backend_.end_step();
  } catch (...) {
    backend_.abort_step();
    seq.abort();
    throw;
  }
  slot.fence = backend_.fence();
  seq.push_queued();
  seq.queued();
}

Model::Output Model::collect(SequenceState& seq) {
  SequenceState::Slot& slot = seq.oldest_queued();
  seq.pop_queued();
  backend_.wait_fence(slot.fence);
  const int64_t s = slot.frames, h = seq.config().height, w = seq.config().width;
  CameraHead::apply_pose_activation(slot.pose.f32(), s, 9);
  Output out;
  out.pose_enc = slot.pose.slice(0, s * 9).reshape({s, 9});
  out.depth = slot.depth.slice(0, s * h * w).reshape({s, h, w});
  out.conf = slot.conf.slice(0, s * h * w).reshape({s, h, w});
  return out;
}

}  // namespace lingbot
