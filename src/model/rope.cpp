#include "model/rope.h"

#include <cmath>

#include "lingbot/error.h"

namespace lingbot {

void rope2d_table(int64_t frames, int64_t specials, int64_t gh, int64_t gw, int64_t head_dim,
                  float freq, Tensor* cos, Tensor* sin) {
  const int64_t per_frame = specials + gh * gw, quarter = head_dim / 4, half = head_dim / 2;
  *cos = Tensor::zeros({frames * per_frame, half});
  *sin = Tensor::zeros({frames * per_frame, half});
  // inv_freq_j = 1 / freq^(2j / (D/2)), all in float32 as the reference computes it.
  std::vector<float> inv(quarter);
  for (int64_t j = 0; j < quarter; ++j)
    inv[j] = 1.0f / std::pow(freq, static_cast<float>(2 * j) / static_cast<float>(half));
  for (int64_t f = 0; f < frames; ++f)
    for (int64_t t = 0; t < per_frame; ++t) {
      float py = 0, px = 0;
      if (t >= specials) {
        py = static_cast<float>((t - specials) / gw + 1);
        px = static_cast<float>((t - specials) % gw + 1);
      }
      float* c = cos->f32() + (f * per_frame + t) * half;
      float* s = sin->f32() + (f * per_frame + t) * half;
      for (int64_t j = 0; j < quarter; ++j) {
        const float ay = py * inv[j], ax = px * inv[j];
        c[j] = std::cos(ay);
        s[j] = std::sin(ay);
        c[quarter + j] = std::cos(ax);
        s[quarter + j] = std::sin(ax);
      }
    }
}

void rope3d_table(int64_t frames, int64_t t0, int64_t specials, int64_t gh, int64_t gw,
                  int64_t head_dim, Tensor* cos, Tensor* sin) {
  LINGBOT_CHECK(head_dim == 64, "3D RoPE is defined for head_dim 64 (20/22/22 split)");
  const int64_t per_frame = specials + gh * gw, pairs = head_dim / 2;
  const int64_t dims[3] = {20, 22, 22};
  // Per pair: which axis, and its frequency 10000^(-2j / dim_axis) in float64.
  std::vector<int> axis(pairs);
  std::vector<double> omega(pairs);
  int64_t p = 0;
  for (int a = 0; a < 3; ++a)
    for (int64_t j = 0; j < dims[a] / 2; ++j, ++p) {
      axis[p] = a;
      omega[p] = 1.0 / std::pow(10000.0, static_cast<double>(2 * j) / static_cast<double>(dims[a]));
    }
  *cos = Tensor::zeros({frames * per_frame, pairs});
  *sin = Tensor::zeros({frames * per_frame, pairs});
  for (int64_t f = 0; f < frames; ++f)
    for (int64_t t = 0; t < per_frame; ++t) {
      double pos[3];
      pos[0] = static_cast<double>(t0 + f);
      if (t < specials) {
        pos[1] = pos[2] = static_cast<double>(t);
      } else {
        pos[1] = static_cast<double>(specials + (t - specials) / gw);
        pos[2] = static_cast<double>(specials + (t - specials) % gw);
      }
      float* c = cos->f32() + (f * per_frame + t) * pairs;
      float* s = sin->f32() + (f * per_frame + t) * pairs;
      for (int64_t q = 0; q < pairs; ++q) {
        const double angle = pos[axis[q]] * omega[q];
        c[q] = static_cast<float>(std::cos(angle));
        s[q] = static_cast<float>(std::sin(angle));
      }
    }
}

}  // namespace lingbot
