#include "model/place_descriptor.h"

#include <cmath>

#include "lingbot/error.h"

namespace lingbot {

const Tensor& PlaceDescriptor::enqueue(Backend& b, const Tensor& trunk, int64_t registers) {
  LINGBOT_CHECK(trunk.rank() == 3 && trunk.dtype() == DType::F32,
                "place descriptor: trunk tokens must be F32 [S, tokens, C]");
  const int64_t s = trunk.dim(0), n = trunk.dim(1), c = trunk.dim(2);
  const int64_t patches = n - 1 - registers;
  LINGBOT_CHECK(registers >= 1 && patches >= 1, "place descriptor: no register or patch tokens");
  Work& wk = work_[{s, n}];
  if (!wk.out.defined()) {
    // Row 0 averages the patch tokens, row 1 the register tokens; the cls token is left out
    // (its training target is the image as a whole of the pre-training data, not the place).
    Tensor w = Tensor::zeros({2, n});
    for (int64_t t = 1 + registers; t < n; ++t) w.f32()[t] = 1.0f / static_cast<float>(patches);
    for (int64_t t = 1; t <= registers; ++t) w.f32()[n + t] = 1.0f / static_cast<float>(registers);
    wk.weights = b.upload(w, DType::F32);
    wk.transposed = b.alloc({c, n}, DType::F32);
    wk.out = b.alloc({s, c, 2}, DType::F32);
  }
  for (int64_t f = 0; f < s; ++f) {
    b.transpose_last2(trunk[f], wk.transposed);
    Tensor y = wk.out[f];
    b.linear(wk.transposed, wk.weights, nullptr, y);  // y[C, 2] = T[C, n] . W[2, n]^T
  }
  return wk.out;
}

void PlaceDescriptor::finish(const float* pooled, int64_t width, float* out) {
  for (int col = 0; col < 2; ++col) {
    double sq = 0;
    for (int64_t i = 0; i < width; ++i) sq += double(pooled[2 * i + col]) * pooled[2 * i + col];
    const double scale = sq > 0 ? 1.0 / (std::sqrt(sq) * std::sqrt(2.0)) : 0.0;
    for (int64_t i = 0; i < width; ++i)
      out[col * width + i] = static_cast<float>(pooled[2 * i + col] * scale);
  }
}

size_t PlaceDescriptor::work_bytes_for(const ModelConfig& cfg, int64_t frames, int64_t tokens) {
  return static_cast<size_t>(2 * tokens + cfg.dim * tokens + frames * cfg.dim * 2) * 4;
}

}  // namespace lingbot
