#include "weights/synthetic.h"

#include <cmath>

namespace lingbot {

uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  uint64_t z = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

uint64_t fnv1a64(const std::string& s) {
  uint64_t h = 0xCBF29CE484222325ull;
  for (unsigned char c : s) h = (h ^ c) * 0x100000001B3ull;
  return h;
}

Tensor synthetic_tensor(uint64_t seed, const std::string& name, const Shape& shape) {
  Tensor t = Tensor::zeros(shape, DType::F32);
  const int64_t n = t.numel();
  const uint64_t key = splitmix64(seed ^ fnv1a64(name));
  const size_t dot = name.rfind('.');
  const std::string leaf = dot == std::string::npos ? name : name.substr(dot + 1);
  enum { kGamma, kNormScale, kBias, kMatrix, kOther } kind = kOther;
  if (leaf == "gamma")
    kind = kGamma;
  else if (leaf == "weight" && shape.size() == 1)
    kind = kNormScale;
  else if (leaf == "bias")
    kind = kBias;
  else if (leaf == "weight")
    kind = kMatrix;
  double a = 1.0;
  if (kind == kMatrix) {
    const double fan_in = static_cast<double>(n / shape[0]);
    a = std::ldexp(1.0, static_cast<int>(std::nearbyint(std::log2(1.56 / std::sqrt(fan_in)))));
  }
  float* v = t.f32();
  // Each element is a pure function of its index, so threads give the same bits.
#pragma omp parallel for schedule(static) if (n >= (int64_t{1} << 18))
  for (int64_t i = 0; i < n; ++i) {
    const int b = static_cast<int>(splitmix64(key + static_cast<uint64_t>(i)) >> 56);
    switch (kind) {
      case kGamma:
        v[i] = static_cast<float>(((b >> 2) + 32) / 256.0);
        break;
      case kNormScale:
        v[i] = static_cast<float>(((b >> 2) + 96) / 128.0);
        break;
      case kBias:
        v[i] = static_cast<float>((b - 128) / 1024.0);
        break;
      case kMatrix:
        v[i] = static_cast<float>((b - 128) / 128.0 * a);
        break;
      case kOther:
        v[i] = static_cast<float>((b - 128) / 256.0);
        break;
    }
  }
  return t;
}

}  // namespace lingbot
