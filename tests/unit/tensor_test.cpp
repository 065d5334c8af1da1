#include "lingbot/tensor.h"

#include <gtest/gtest.h>

#include <cmath>

#include "lingbot/error.h"

namespace lingbot {

TEST(Tensor, BF16RoundsToNearestEven) {
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(bf16_to_f32(0x3f80), 1.0f);
  // 1 + 2^-8 is halfway between two bf16 values: ties go to the even mantissa (1.0).
  EXPECT_EQ(f32_to_bf16(1.0f + 1.0f / 256), 0x3f80);
  EXPECT_EQ(f32_to_bf16(1.0f + 3.0f / 256), 0x3f82);
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(NAN))));
}

TEST(Tensor, F16RoundTripsRepresentableValues) {
  for (float v : {0.0f, 1.0f, -2.5f, 65504.0f, 6.1035156e-05f, 5.9604645e-08f, -0.125f}) {
    EXPECT_EQ(f16_to_f32(f32_to_f16(v)), v) << v;
  }
  EXPECT_TRUE(std::isinf(f16_to_f32(f32_to_f16(1e6f))));
}

TEST(Tensor, SliceAndReshapeAreViews) {
  Tensor t = Tensor::zeros({4, 3});
  for (int i = 0; i < 12; ++i) t.f32()[i] = static_cast<float>(i);
  Tensor row = t[2];
  EXPECT_EQ(row.shape(), (Shape{3}));
  EXPECT_EQ(row.f32()[0], 6.0f);
  row.f32()[0] = 100.0f;
  EXPECT_EQ(t.f32()[6], 100.0f);
  EXPECT_EQ(t.reshape({-1}).dim(0), 12);
  EXPECT_THROW(t.reshape({5, 2}), Error);
  EXPECT_THROW(t.slice(3, 5), Error);
}

TEST(Tensor, ConvertsBetweenDtypes) {
  Tensor t = Tensor::zeros({3});
  t.f32()[0] = 1.5f;
  t.f32()[1] = -2.0f;
  t.f32()[2] = 3.0f;
  Tensor h = t.to(DType::BF16).to(DType::F32);
  EXPECT_EQ(h.f32()[0], 1.5f);
  EXPECT_EQ(h.f32()[1], -2.0f);
  Tensor i = t.to(DType::I32);
  EXPECT_EQ(i.data<int32_t>()[2], 3);
}

}  // namespace lingbot
