// The convolution's epilogue on the CPU: ReLU and accumulate are the plain convolution followed
// by the activation or added to what the output held. The GPU's are compared with these in
// GpuOps.Conv2dEpiloguesAndSplitsMatchCpu.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "backend/ops.h"

namespace lingbot {
namespace {

Tensor random_tensor(const Shape& shape, std::mt19937& gen) {
  std::uniform_real_distribution<float> dist(-1.f, 1.f);
  Tensor t = Tensor::zeros(shape);
  for (int64_t i = 0; i < t.numel(); ++i) t.f32()[i] = dist(gen);
  return t;
}

TEST(ConvEpilogue, ReluAndAccumulateFollowThePlainConvolution) {
  auto be = make_cpu_backend(1);
  std::mt19937 gen(7);
  for (int k : {1, 3}) {
    SCOPED_TRACE("k=" + std::to_string(k));
    const int pad = k / 2;
    Tensor x = random_tensor({2, 6, 9, 11}, gen), w = random_tensor({5, 6, k, k}, gen);
    Tensor b = random_tensor({5}, gen), y0 = random_tensor({2, 5, 9, 11}, gen);
    Tensor plain = Tensor::zeros(y0.shape()), relu = Tensor::zeros(y0.shape());
    be->conv2d(x, w, &b, 1, pad, plain);
    be->conv2d(x, w, &b, 1, pad, relu, Act::ReLU);
    Tensor acc = Tensor::zeros(y0.shape());
    std::copy(y0.f32(), y0.f32() + y0.numel(), acc.f32());
    be->conv2d(x, w, &b, 1, pad, acc, Act::None, true);
    int negatives = 0;
    for (int64_t i = 0; i < plain.numel(); ++i) {
      negatives += plain.f32()[i] < 0.f;
      EXPECT_EQ(relu.f32()[i], std::max(plain.f32()[i], 0.f)) << i;
      EXPECT_NEAR(acc.f32()[i], y0.f32()[i] + plain.f32()[i], 1e-5f) << i;
    }
    EXPECT_GT(negatives, plain.numel() / 4);  // the ReLU had something to do
  }
}

}  // namespace
}  // namespace lingbot
