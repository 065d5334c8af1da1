#include "pipeline.h"

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "lingbot/error.h"
#include "weights/safetensors.h"

namespace lingbot::cli {
namespace {

// Collects per-frame results into the predictions file's tensors.
class PredictionsWriter {
 public:
  void add(const FrameResult& r) {
    if (frames_ == 0) {
      h_ = r.height;
      w_ = r.width;
    }
    ++frames_;
    pose_.insert(pose_.end(), r.pose_enc.begin(), r.pose_enc.end());
    c2w_.insert(c2w_.end(), r.c2w.begin(), r.c2w.end());
    w2c_.insert(w2c_.end(), r.w2c.begin(), r.w2c.end());
    k_.insert(k_.end(), r.intrinsics.begin(), r.intrinsics.end());
    depth_.insert(depth_.end(), r.depth.begin(), r.depth.end());
    conf_.insert(conf_.end(), r.confidence.begin(), r.confidence.end());
  }
  void write(const std::string& path) {
    auto view = [](std::vector<float>& v, Shape s) { return Tensor::wrap(v.data(), s, DType::F32, nullptr); };
    TensorMap t;
    t["pose_enc"] = view(pose_, {frames_, 9});
    t["c2w"] = view(c2w_, {frames_, 3, 4});
    t["w2c"] = view(w2c_, {frames_, 3, 4});
    t["intrinsics"] = view(k_, {frames_, 3, 3});
    t["depth"] = view(depth_, {frames_, h_, w_});
    t["depth_conf"] = view(conf_, {frames_, h_, w_});
    write_safetensors(path, t, {{"pose_convention", "c2w = [R(q)|t], OpenCV camera axes"}});
  }

 private:
  int64_t frames_ = 0, h_ = 0, w_ = 0;
  std::vector<float> pose_, c2w_, w2c_, k_, depth_, conf_;
};

}  // namespace

RunSummary run_stream(Engine& engine, const StreamOptions& options, const FrameSource& source,
                      const RunOutputs& out) {
  std::error_code ec;
  std::filesystem::create_directories(out.out_dir, ec);
  if (ec || !std::filesystem::is_directory(out.out_dir))
    throw Error("cannot create output folder " + out.out_dir + ": " + ec.message());
  std::ofstream stats;
  if (!out.cache_stats_path.empty()) {
    stats.open(out.cache_stats_path);
    if (!stats) throw Error("cannot write " + out.cache_stats_path);
  }
  auto session = engine.start(options);
  PredictionsWriter predictions;
  RunSummary summary;
  const auto t0 = std::chrono::steady_clock::now();
  auto on_result = [&](const FrameResult& r) {
    predictions.add(r);
    ++summary.frames;
    if (stats.is_open()) {
      const CacheStats c = session->cache_stats();
      nlohmann::ordered_json j = {{"frame", r.index},          {"keyframe", r.keyframe},
                          {"stored_frames", c.stored_frames}, {"scale_pages", c.scale_pages},
                          {"live_pages", c.live_pages}, {"free_pages", c.free_pages},
                          {"special_tokens", c.special_tokens}, {"bytes", c.bytes}};
      stats << j.dump() << "\n";
      stats.flush();
    }
    if (!out.quiet) {
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      std::fprintf(stderr, "frame %lld%s  %.2f frames/s\n", static_cast<long long>(r.index),
                   r.keyframe ? "" : " (non-keyframe)", summary.frames / s);
    }
  };
  while (auto frame = source()) session->push(*frame, on_result);
  session->finish(on_result);
  summary.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (summary.frames == 0) throw Error("no frames to process");
  predictions.write(out.out_dir + "/predictions.safetensors");
  return summary;
}

}  // namespace lingbot::cli
