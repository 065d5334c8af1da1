#include <algorithm>
#include <cstring>
#include <exception>

#include "lingbot/error.h"
#include "lingbot/exports.h"
#include "weights/safetensors.h"

namespace lingbot {

PredictionsWriter::PredictionsWriter(int64_t expected)
    : expected_(std::max<int64_t>(expected, 0)) {}

void PredictionsWriter::add(const FrameResult& r) {
  if (frames_ == 0) {
    h_ = r.height;
    w_ = r.width;
    const size_t n = static_cast<size_t>(expected_);
    try {
      for (auto* v : {&pose_, &k_}) v->reserve(n * 9);
      for (auto* v : {&c2w_, &w2c_}) v->reserve(n * 12);
      for (auto* v : {&depth_, &conf_}) v->reserve(n * r.depth.size());
    } catch (const std::exception&) {  // std::length_error, std::bad_alloc
    }
  }
  LINGBOT_CHECK(r.height == h_ && r.width == w_,
                "all frames of a run must have one size: frame " + std::to_string(r.index) +
                    " is " + std::to_string(r.width) + "x" + std::to_string(r.height) +
                    ", the first " + std::to_string(w_) + "x" + std::to_string(h_));
  ++frames_;
  pose_.insert(pose_.end(), r.pose_enc.begin(), r.pose_enc.end());
  c2w_.insert(c2w_.end(), r.c2w.begin(), r.c2w.end());
  w2c_.insert(w2c_.end(), r.w2c.begin(), r.w2c.end());
  k_.insert(k_.end(), r.intrinsics.begin(), r.intrinsics.end());
  depth_.insert(depth_.end(), r.depth.begin(), r.depth.end());
  conf_.insert(conf_.end(), r.confidence.begin(), r.confidence.end());
  frame_type_.push_back(r.scale_frame ? 0 : r.keyframe ? 1 : 2);
  is_keyframe_.push_back(r.keyframe ? 1 : 0);
}

void PredictionsWriter::add_window(const WindowAlignment& w) {
  windowed_ = true;
  chunk_scales_.push_back(w.scale);
  chunk_transforms_.insert(chunk_transforms_.end(), w.transform.begin(), w.transform.end());
}

// Views of the buffers, for reading only.
std::map<std::string, Tensor> PredictionsWriter::views() const {
  auto view = [](const auto& v, Shape s, DType t) {
    using T = typename std::decay_t<decltype(v)>::value_type;
    return Tensor::wrap(const_cast<T*>(v.data()), s, t, nullptr);
  };
  std::map<std::string, Tensor> t;
  t["pose_enc"] = view(pose_, {frames_, 9}, DType::F32);
  t["c2w"] = view(c2w_, {frames_, 3, 4}, DType::F32);
  t["w2c"] = view(w2c_, {frames_, 3, 4}, DType::F32);
  t["intrinsics"] = view(k_, {frames_, 3, 3}, DType::F32);
  t["depth"] = view(depth_, {frames_, h_, w_}, DType::F32);
  t["depth_conf"] = view(conf_, {frames_, h_, w_}, DType::F32);
  t["frame_type"] = view(frame_type_, {frames_}, DType::U8);
  t["is_keyframe"] = view(is_keyframe_, {frames_}, DType::Bool);
  if (windowed_) {
    const int64_t n = static_cast<int64_t>(chunk_scales_.size());
    t["chunk_scales"] = view(chunk_scales_, {n}, DType::F32);
    t["chunk_transforms"] = view(chunk_transforms_, {n, 4, 4}, DType::F32);
  }
  return t;
}

std::map<std::string, Tensor> PredictionsWriter::tensors() const {
  std::map<std::string, Tensor> t = views();
  for (auto& [name, v] : t) {
    Tensor copy = Tensor::zeros(v.shape(), v.dtype());
    if (v.nbytes()) std::memcpy(copy.raw(), v.raw(), v.nbytes());
    v = copy;
  }
  return t;
}

void PredictionsWriter::write(const std::string& path) const {
  const std::map<std::string, Tensor> v = views();
  std::map<std::string, std::string> meta{
      {"pose_convention", "c2w = [R(q)|t], OpenCV camera axes"}};
  if (windowed_) meta["mode"] = "windowed";
  write_safetensors(path, v, meta);
}

}  // namespace lingbot
