// Engine: picks the backend, reads the weights, builds the model; sessions share it.
#include "lingbot/engine.h"

#include <algorithm>
#include <fstream>
#include <future>
#include <memory>

#include "backend/ops.h"
#include "lingbot/error.h"
#include "model/model.h"
#include "stream/session.h"
#include "stream/snapshot_file.h"
#include "weights/checkpoint.h"
#include "weights/digest.h"

namespace lingbot {
namespace {

class EngineImpl final : public Engine {
 public:
  explicit EngineImpl(const EngineOptions& o) {
    const GpuPath gpu_path = parse_gpu_path(o.gpu_path);  // checked on the CPU device too
    if (o.device == "cpu") {
      backend_ = make_cpu_backend(o.threads);
    } else if (const int gpu = cuda_device_index(o.device); gpu >= 0) {
      std::string why;
      backend_ = make_cuda_backend(gpu, &why, gpu_path);
      if (!backend_) throw Error("no CUDA backend: " + why);
    } else {
      throw Error("unknown device '" + o.device + "' (expected cpu, cuda or cuda:N)",
                  ErrorKind::InvalidArgument);
    }
    const std::string kSynthetic = "synthetic:";
    std::unique_ptr<WeightLoader> loader;
    if (o.model.rfind(kSynthetic, 0) == 0) {
      const std::string seed = o.model.substr(kSynthetic.size());
      LINGBOT_CHECK_ARG(!seed.empty() &&
                            seed.find_first_not_of("0123456789") == std::string::npos &&
                            seed.size() <= 19,
                        "synthetic weights need a numeric seed, e.g. synthetic:1");
      config_ = ModelConfig::preset(o.arch.empty() ? "lingbot-map" : o.arch);
      loader = std::make_unique<WeightLoader>(std::stoull(seed), *backend_);
      std::promise<std::string> digest;
      digest.set_value(synthetic_weights_digest(std::stoull(seed)));
      weights_ = digest.get_future().share();
    } else {
      LINGBOT_CHECK_ARG(!o.model.empty(), "no model given (a checkpoint path or synthetic:SEED)");
      tensors_ = load_checkpoint(o.model);
      config_ = o.arch.empty() ? ModelConfig::infer(tensors_) : ModelConfig::preset(o.arch);
      loader = std::make_unique<WeightLoader>(tensors_, *backend_, o.model);
      // The digest reads every byte of the weights once: beside the upload, not before it; a
      // save or resume waits for it. The thread holds the tensors (the file mapping) until then.
      weights_ = std::async(std::launch::async, [tensors = tensors_] {
                   return weights_digest(tensors);
                 }).share();
    }
    resolve_precision(o.precision, is_cuda_device(o.device), backend_->reads_fp8_kv(), config_);
    model_ = std::make_unique<Model>(*backend_, *loader, config_);
    scheduler_ = std::make_unique<StepScheduler>(*model_);
    parameters_ = loader->parameters();
    tensors_.clear();  // weights now live on the backend
  }

  ~EngineImpl() override {
    if (backend_) backend_->use_on_this_thread();  // the weights are freed on this thread
  }

  ModelInfo info() const override {
    return {config_.arch,
            config_.dim,
            config_.depth,
            config_.heads,
            parameters_,
            backend_->name(),
            dtype_name(config_.compute),
            dtype_name(config_.kv_fp8 ? DType::F8E4M3 : config_.compute)};
  }

  size_t device_memory_used() const override { return backend_->device_memory_used(); }
  size_t device_memory_free() const override { return backend_->device_memory_free(); }

  std::unique_ptr<Session> start(const StreamOptions& options) override {
    return std::make_unique<StreamSession>(*model_, *scheduler_, options, weights_);
  }

  std::unique_ptr<Session> resume(const std::string& path, const ResumeOptions& options) override {
    const SessionSnapshot snap = read_snapshot(path);
    return StreamSession::resume(*model_, *scheduler_, weights_, snap, options, path);
  }

  std::map<std::string, double> profile_ms() const override { return model_->profile().snapshot(); }
  void reset_profile() override { model_->profile().reset(); }

 private:
  std::unique_ptr<Backend> backend_;
  ModelConfig config_;
  TensorMap tensors_;
  std::unique_ptr<Model> model_;
  std::unique_ptr<StepScheduler> scheduler_;  // batches the sessions' steps
  size_t parameters_ = 0;
  std::shared_future<std::string> weights_;  // the weights' digest, for snapshots
};

}  // namespace

void Session::save(const std::string&) {
  throw Error("this session cannot be saved");
}

std::vector<FrameResult> Session::trajectory() const {
  return {};
}

std::unique_ptr<Session> Engine::resume(const std::string&, const ResumeOptions&) {
  throw Error("this engine cannot resume sessions");
}

bool is_session_snapshot(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  unsigned char len[8];
  if (!in.read(reinterpret_cast<char*>(len), 8)) return false;
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | len[i];
  // The format is named in __metadata__, written first; a few KB hold it.
  std::string header(static_cast<size_t>(std::min<uint64_t>(n, 1 << 16)), '\0');
  in.read(header.data(), static_cast<std::streamsize>(header.size()));
  header.resize(static_cast<size_t>(in.gcount()));
  return header.find(std::string("\"") + kSnapshotFormat + "\"") != std::string::npos;
}

SnapshotInfo read_snapshot_info(const std::string& path) {
  const SessionSnapshot snap = read_snapshot(path);
  const SnapshotState& s = snap.state;
  SnapshotInfo info;
  info.version = kSnapshotVersion;
  info.arch = s.model.arch;
  info.compute = s.model.compute;
  info.kv_cache = s.model.kv_cache;
  info.weights = s.model.weights;
  info.dim = s.model.dim;
  info.depth = s.model.depth;
  info.heads = s.model.heads;
  info.options = s.options;
  info.height = s.height;
  info.width = s.width;
  info.frames = s.next_index;
  info.stored_frames = s.stored_frames;
  info.scale_frames = static_cast<int64_t>(s.pages.scale.size());
  info.window_frames = static_cast<int64_t>(s.pages.live.size());
  info.special_frames = s.stream_rows / (s.options.camera_only ? 1 : 6);
  info.pending_frames = s.pending;
  info.trajectory = s.trajectory;
  info.bytes = snap.bytes;
  for (const auto& [name, t] : snap.tensors) {
    if (name.rfind("kv.", 0) == 0) info.kv_bytes += t.nbytes();
    if (name.rfind("camera.", 0) == 0) info.camera_bytes += t.nbytes();
  }
  return info;
}

std::unique_ptr<Engine> Engine::create(const EngineOptions& options) {
  return std::make_unique<EngineImpl>(options);
}

int cuda_device_index(const std::string& device) {
  if (device == "cuda") return 0;
  if (device.rfind("cuda:", 0) != 0 || device.size() == 5 || device.size() > 8) return -1;
  int n = 0;
  for (size_t i = 5; i < device.size(); ++i) {
    if (device[i] < '0' || device[i] > '9') return -1;
    n = n * 10 + (device[i] - '0');
  }
  return n;
}

bool is_cuda_device(const std::string& device) {
  return cuda_device_index(device) >= 0;
}

// The model was trained with video RoPE over 320 views, so a video of more frames caches every
// ceil(frames / 320)-th one.
int auto_keyframe_interval(int64_t frames) {
  return frames > 320 ? static_cast<int>((frames + 319) / 320) : 1;
}

}  // namespace lingbot
