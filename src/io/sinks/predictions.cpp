#include <algorithm>
#include <exception>

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
  ++frames_;
  pose_.insert(pose_.end(), r.pose_enc.begin(), r.pose_enc.end());
  c2w_.insert(c2w_.end(), r.c2w.begin(), r.c2w.end());
  w2c_.insert(w2c_.end(), r.w2c.begin(), r.w2c.end());
  k_.insert(k_.end(), r.intrinsics.begin(), r.intrinsics.end());
  depth_.insert(depth_.end(), r.depth.begin(), r.depth.end());
  conf_.insert(conf_.end(), r.confidence.begin(), r.confidence.end());
}

void PredictionsWriter::write(const std::string& path) const {
  // Views of the buffers: write_safetensors only reads them.
  auto view = [](const std::vector<float>& v, Shape s) {
    return Tensor::wrap(const_cast<float*>(v.data()), s, DType::F32, nullptr);
  };
  TensorMap t;
  t["pose_enc"] = view(pose_, {frames_, 9});
  t["c2w"] = view(c2w_, {frames_, 3, 4});
  t["w2c"] = view(w2c_, {frames_, 3, 4});
  t["intrinsics"] = view(k_, {frames_, 3, 3});
  t["depth"] = view(depth_, {frames_, h_, w_});
  t["depth_conf"] = view(conf_, {frames_, h_, w_});
  write_safetensors(path, t, {{"pose_convention", "c2w = [R(q)|t], OpenCV camera axes"}});
}

}  // namespace lingbot
