#include "model/model.h"

#include <algorithm>
#include <vector>

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
  aggregator_.set_profile(&profile_);
  depth_.set_profile(&profile_);
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
  return camera_.make_cache(backend_, iterations, camera_cache_dtype(cfg_));
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
  dpt.matrices = config.compute;
  return dpt;
}

ParamCount Model::parameters(const ModelConfig& config) {
  ParamCount n = Aggregator::parameters(config);
  n += CameraHead::parameters(camera_head_config(config));
  n += DepthHead::parameters(depth_head_config(config));
  return n;
}

Model::WorkBytes Model::work_bytes_for(const ModelConfig& config, int64_t height, int64_t width,
                                       int64_t first_step_frames) {
  const int64_t s1 = std::max<int64_t>(first_step_frames, 1);
  const DepthHeadConfig dpt = depth_head_config(config);
  auto step = [&](int64_t s) {
    return Aggregator::work_bytes_for(config, s, height, width) +
           static_cast<size_t>(s * 3 * height * width) * 4;  // the normalized frames
  };
  WorkBytes w;
  w.first_step = step(s1);
  w.one_frame_steps = step(1);
  // The camera head keeps one scratch, sized for the larger call, and its input tokens.
  w.first_step +=
      CameraHead::scratch_bytes_for(camera_head_config(config), s1, camera_cache_dtype(config));
  w.first_step += static_cast<size_t>(s1 * 2 * config.dim) * 4;
  // The plan, and the upsampled image of a backend that does not fuse it into the convolution
  // reading it (an upper bound where the backend does).
  w.depth_plan = DepthHead::plan_bytes_for(dpt, height, width) +
                 DepthHead::upsampled_bytes_for(dpt, height, width);
  // The backend's grow-only scratch block holds its largest request: a depth-head convolution
  // or the split attention of a streamed frame. And the GEMM workspace.
  const int64_t tokens =
      ModelConfig::kSpecialTokens + (height / config.patch) * (width / config.patch);
  w.scratch =
      std::max(
          DepthHead::scratch_bytes_for(dpt, height, width),
          static_cast<size_t>(scratch::attention_floats(tokens, config.heads, config.head_dim())) *
              4) +
      scratch::kGemmWorkspaceBytes;
  // The camera head runs on the backend's side queue, which has a scratch and a GEMM workspace
  // of its own.
  w.scratch += CameraHead::backend_scratch_bytes_for(camera_head_config(config), s1) +
               scratch::kSideGemmWorkspaceBytes;
  return w;
}

size_t Model::camera_cache_bytes_for(const ModelConfig& config, int iterations, int64_t frames,
                                     const CameraCacheLimit& limit) {
  return CameraHead::cache_bytes_for(camera_head_config(config), iterations,
                                     camera_cache_dtype(config), frames, limit);
}

Model::Output Model::run(SequenceState& seq, const Tensor& images01, StepMode mode) {
  LINGBOT_CHECK(seq.steps_queued() == 0, "Model::run while steps of the sequence are queued");
  enqueue(seq, images01, mode);
  return collect(seq);
}

void Model::enqueue(SequenceState& seq, const Tensor& images01, StepMode mode) {
  enqueue({{&seq, images01, mode}});
}

void Model::validate(const Part& part) const {
  const Tensor& images01 = part.images01;
  const SequenceState& seq = *part.seq;
  const int64_t h = images01.rank() == 4 ? images01.dim(2) : 0;
  const int64_t w = images01.rank() == 4 ? images01.dim(3) : 0;
  LINGBOT_CHECK(images01.rank() == 4 && images01.dim(0) >= 1 && images01.dim(1) == 3 &&
                    images01.dtype() == DType::F32 && images01.device() == Device::CPU &&
                    h % cfg_.patch == 0 && w % cfg_.patch == 0,
                "frames must be host F32 [S, 3, H, W] with H and W multiples of " +
                    std::to_string(cfg_.patch) + ", got " + shape_str(images01.shape()));
  LINGBOT_CHECK(h == seq.config().height && w == seq.config().width,
                "frames of " + std::to_string(w) + "x" + std::to_string(h) +
                    " on a sequence sized for " + std::to_string(seq.config().width) + "x" +
                    std::to_string(seq.config().height));
  LINGBOT_CHECK(!seq.step_open(), "a step began before the previous one was decided");
  LINGBOT_CHECK(seq.steps_queued() < 2, "two steps of this sequence are already queued");
}

void Model::enqueue(const std::vector<Part>& parts) {
  HostScope hs(profile_, "host: queue a step");
  LINGBOT_CHECK(!parts.empty(), "a step of no sequence");
  validate(parts[0]);
  const int64_t h = parts[0].images01.dim(2), w = parts[0].images01.dim(3);
  std::vector<int64_t> shape{h, w};
  for (const Part& part : parts) {
    validate(part);
    LINGBOT_CHECK(part.images01.dim(2) == h && part.images01.dim(3) == w,
                  "the sequences of one step must have frames of one size");
    LINGBOT_CHECK(parts.size() == 1 || part.images01.dim(0) == 1,
                  "several sequences share a step with one frame each");
    for (const Part& other : parts)
      LINGBOT_CHECK(&other == &part || other.seq != part.seq, "a sequence appears twice in a step");
    shape.push_back(part.images01.dim(0));
  }
  int64_t frames = 0;
  for (const Part& part : parts) {
    const int64_t s = part.images01.dim(0);
    SequenceState::Slot& slot = part.seq->next_slot();
    // Grow the slot's host buffers only when a step needs more (phase 1 is the largest).
    if (slot.input.numel() < s * 3 * h * w) {
      slot.input = backend_.alloc_host({s * 3 * h * w});
      slot.depth = backend_.alloc_host({s * h * w});
      slot.conf = backend_.alloc_host({s * h * w});
    }
    if (slot.pose.numel() < s * 9) slot.pose = backend_.alloc_host({s * 9});
    if (part.seq->config().descriptors && slot.descriptor.numel() < s * cfg_.dim * 2)
      slot.descriptor = backend_.alloc_host({s * cfg_.dim * 2});
    slot.frames = s;
    normalize_into(part.images01, slot.input.f32());
    frames += s;
  }

  std::lock_guard<std::mutex> lock(mu_);
  if (!images_.defined() || images_.shape() != Shape{frames, 3, h, w})
    images_ = backend_.alloc({frames, 3, h, w}, DType::F32);
  // The device work of the step is recorded and replayed as a whole where the backend can: not
  // while profiling (its scopes wait for the device), and not for the first step of a new
  // shape, whose buffers are still being allocated (from the device's pool, not inside the
  // recording). The activations kept per shape are freed on a change of frame size and before
  // and after a phase-1 step (the largest), as one sequence's steps always do; batches of
  // several sequences keep one set per batch size for the next.
  const auto phase1 = [](const std::vector<int64_t>& sh) { return sh.size() == 3 && sh[2] > 1; };
  if (shape != last_shape_ && (phase1(shape) || phase1(last_shape_) || last_shape_.size() < 2 ||
                               last_shape_[0] != h || last_shape_[1] != w)) {
    aggregator_.release_buffers();  // freed in stream order
    depth_.release_buffers();       // (sized for the largest batch of sequences so far)
    descriptor_.release_buffers();
  }
  bool descriptors = false;
  for (const Part& part : parts) descriptors = descriptors || part.seq->config().descriptors;
  const bool new_descriptor_buffers =
      descriptors &&
      !descriptor_.ready(frames, 1 + cfg_.registers + (h / cfg_.patch) * (w / cfg_.patch));
  backend_.begin_step(!Profile::enabled() && shape == last_shape_ && !new_descriptor_buffers);
  last_shape_ = shape;
  // The one place a failed step is undone: the backend drops what it recorded, each sequence
  // what the step stored.
  size_t begun = 0;
  try {
    std::vector<AggregatorPart> agg;
    int64_t f0 = 0;
    for (const Part& part : parts) {
      SequenceState& seq = *part.seq;
      const int64_t s = part.images01.dim(0);
      seq.begin(s, part.mode);
      ++begun;
      const SequenceState::Slot& slot = seq.next_slot();
      Tensor dst = images_.slice(f0, f0 + s);
      backend_.upload_into(slot.input.slice(0, s * 3 * h * w).reshape({s, 3, h, w}), dst);
      agg.push_back({&seq.kv(), seq.scale_frames(), s});
      f0 += s;
    }
    layers_ = &aggregator_.enqueue(backend_, images_, agg);
    const auto& layers = *layers_;
    // Place descriptors only where a sequence asks: otherwise the step queues exactly what it
    // did without them.
    if (descriptors) {
      const Tensor& pooled =
          descriptor_.enqueue(backend_, aggregator_.trunk_tokens(), cfg_.registers);
      int64_t r = 0;
      for (const Part& part : parts) {
        const int64_t s = part.images01.dim(0);
        if (part.seq->config().descriptors)
          backend_.download_async(pooled.slice(r, r + s), part.seq->next_slot().descriptor.f32());
        r += s;
      }
    }
    // The camera head reads token 0 (the camera token) of the last emitted layer.
    const int64_t c2 = layers[3].dim(2);
    if (!cam_tokens_.defined() || cam_tokens_.dim(0) != frames)
      cam_tokens_ = backend_.alloc({frames, c2}, DType::F32);
    for (int64_t f = 0; f < frames; ++f) {
      Tensor dst = cam_tokens_[f];
      backend_.copy(layers[3][f].slice(0, 1), dst);
    }
    // The heads per sequence: the camera head attends through the sequence's own caches, and
    // the depth head writes into its host slot. The camera heads (a long chain of small,
    // launch-bound kernels) run on the side queue beside the depth heads (large convolutions);
    // they share nothing but their inputs. Not while profiling, whose scopes time each alone.
    const bool side = !Profile::enabled();
    if (side) backend_.begin_side();
    // One camera-head call per run of sequences with the same iteration count (usually all of
    // them): its time is the bytes of its matrices, read once for every frame of the run.
    f0 = 0;
    for (size_t a = 0; a < parts.size();) {
      const int iterations = parts[a].seq->config().camera_iterations;
      size_t b = a;
      std::vector<CameraPart> run;
      int64_t rows = 0;
      for (; b < parts.size() && parts[b].seq->config().camera_iterations == iterations; ++b) {
        SequenceState& seq = *parts[b].seq;
        run.push_back({&seq.camera(), parts[b].images01.dim(0), seq.stores_camera()});
        rows += run.back().frames;
      }
      ProfileScope ps(backend_, &profile_, "camera head");
      const Tensor& pose =
          camera_.enqueue(backend_, cam_tokens_.slice(f0, f0 + rows), run, iterations);
      int64_t r = 0;
      for (size_t i = a; i < b; ++i) {
        const int64_t s = parts[i].images01.dim(0);
        backend_.download_async(pose.slice(r, r + s), parts[i].seq->next_slot().pose.f32());
        r += s;
      }
      f0 += rows;
      a = b;
    }
    if (side) backend_.end_side();
    // The depth head writes each frame into its sequence's host slot. The one-frame steps of
    // several sequences go through it together (its coarse levels are small launches for one
    // frame); a sequence's first step (its scale frames) goes frame by frame, so one sequence's
    // plan stays the size of one frame.
    std::vector<float*> depth_out, conf_out;
    for (const Part& part : parts) {
      const SequenceState::Slot& slot = part.seq->next_slot();
      for (int64_t s = 0; s < part.images01.dim(0); ++s) {
        depth_out.push_back(slot.depth.f32() + s * h * w);
        conf_out.push_back(slot.conf.f32() + s * h * w);
      }
    }
    {
      ProfileScope ps(backend_, &profile_, "depth head");
      depth_.enqueue(backend_, layers, static_cast<int>(h), static_cast<int>(w), depth_out,
                     conf_out, static_cast<int64_t>(parts.size()));
    }
    backend_.end_step();
  } catch (...) {
    backend_.abort_step();
    for (size_t i = 0; i < begun; ++i) parts[i].seq->abort();
    throw;
  }
  const uint64_t fence = backend_.fence();
  for (const Part& part : parts) {
    part.seq->next_slot().fence = fence;
    part.seq->push_queued();
    part.seq->queued();
  }
}

Model::Output Model::collect(SequenceState& seq) {
  SequenceState::Slot& slot = seq.oldest_queued();
  seq.pop_queued();
  {
    HostScope hs(profile_, "host: wait for the device");
    backend_.wait_fence(slot.fence);
  }
  const int64_t s = slot.frames, h = seq.config().height, w = seq.config().width;
  CameraHead::apply_pose_activation(slot.pose.f32(), s, 9);
  Output out;
  out.pose_enc = slot.pose.slice(0, s * 9).reshape({s, 9});
  out.depth = slot.depth.slice(0, s * h * w).reshape({s, h, w});
  out.conf = slot.conf.slice(0, s * h * w).reshape({s, h, w});
  if (seq.config().descriptors) {
    const int64_t c = cfg_.dim;
    out.descriptor = Tensor::zeros({s, 2 * c});
    for (int64_t f = 0; f < s; ++f)
      PlaceDescriptor::finish(slot.descriptor.f32() + f * c * 2, c,
                              out.descriptor.f32() + f * 2 * c);
  }
  return out;
}

}  // namespace lingbot
