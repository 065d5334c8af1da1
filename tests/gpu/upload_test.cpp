// Large uploads (weights) go through pinned slots in chunks: every byte must land in place, in
// every dtype path, and the host source must be free to change as soon as upload returns.
// Skips without a CUDA backend.
#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include "backend/ops.h"
#include "weights/synthetic.h"

namespace lingbot {
namespace {

TEST(GpuUpload, LargeUploadsArriveInPlaceAndReleaseTheSource) {
  std::string why;
  auto gpu = make_cuda_backend(&why);
  if (!gpu) GTEST_SKIP() << "no CUDA backend: " << why;
  // Several 16 MiB chunks and a partial last one.
  const int64_t n = (int64_t{10} << 20) + 12345;
  Tensor noise = Tensor::zeros({n});  // full-precision floats: any misplaced byte shows
  Tensor exact = Tensor::zeros({n});  // small integers / 64: exact in bf16, so bitwise too
  for (int64_t i = 0; i < n; ++i) {
    const uint64_t r = splitmix64(static_cast<uint64_t>(i));
    noise.f32()[i] = static_cast<float>(static_cast<int64_t>(r >> 40) - (int64_t{1} << 23)) / 3.0f;
    exact.f32()[i] = static_cast<float>(static_cast<int>(r % 255) - 127) / 64.0f;
  }
  Tensor noise_src = noise.to(DType::F32), exact_src = exact.to(DType::F32);
  Tensor exact_bf16 = exact.to(DType::BF16);
  Tensor as_f32 = gpu->upload(noise_src, DType::F32);       // same dtype: chunks straight in
  Tensor as_bf16 = gpu->upload(exact_src, DType::BF16);     // converted on the device
  Tensor from_bf16 = gpu->upload(exact_bf16, DType::F32);   // a bf16 file's tensor
  Tensor bf16_kept = gpu->upload(exact_bf16, DType::BF16);  // stored as is
  // Poison the sources at once: the uploads must have taken their bytes already.
  for (Tensor* t : {&noise_src, &exact_src, &exact_bf16}) std::memset(t->raw(), 0xff, t->nbytes());
  auto same = [](const Tensor& got, const Tensor& want) {
    return got.nbytes() == want.nbytes() && std::memcmp(got.raw(), want.raw(), want.nbytes()) == 0;
  };
  EXPECT_TRUE(same(gpu->download(as_f32), noise));
  EXPECT_TRUE(same(gpu->download(as_bf16), exact));
  EXPECT_TRUE(same(gpu->download(from_bf16), exact));
  EXPECT_TRUE(same(gpu->download(bf16_kept), exact));
}

}  // namespace
}  // namespace lingbot
