// The fp8 KV cache on the CPU: e4m3 conversions, attention over e4m3 segments, and the paged
// cache's scales and stored bytes.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "backend/ops.h"
#include "cache/paged_kv.h"
#include "test_util.h"

namespace lingbot {
namespace {

TEST(Fp8, EveryCodeSurvivesARoundTrip) {
  for (int c = 0; c < 256; ++c) {
    const float f = f8e4m3_to_f32(static_cast<uint8_t>(c));
    if ((c & 0x7f) == 0x7f) {
      EXPECT_TRUE(std::isnan(f)) << c;
      continue;
    }
    EXPECT_EQ(f32_to_f8e4m3(f), c) << "code " << c << " value " << f;
  }
  EXPECT_EQ(f8e4m3_to_f32(0x7e), 448.f);
  EXPECT_EQ(f8e4m3_to_f32(0x01), std::ldexp(1.f, -9));
  EXPECT_EQ(f8e4m3_to_f32(0x38), 1.f);
  EXPECT_EQ(f8e4m3_to_f32(0xb8), -1.f);
}

TEST(Fp8, RoundsToNearestEvenAndSaturates) {
  EXPECT_EQ(f32_to_f8e4m3(1.0625f), 0x38);  // tie between 1 and 1.125: even
  EXPECT_EQ(f32_to_f8e4m3(1.1875f), 0x3a);  // tie between 1.125 and 1.25
  EXPECT_EQ(f32_to_f8e4m3(std::nextafter(1.0625f, 2.f)), 0x39);
  EXPECT_EQ(f32_to_f8e4m3(std::ldexp(1.f, -10)), 0x00);        // subnormal tie: 0
  EXPECT_EQ(f32_to_f8e4m3(3 * std::ldexp(1.f, -10)), 0x02);    // 1.5 * 2^-9: even
  EXPECT_EQ(f32_to_f8e4m3(7.5f * std::ldexp(1.f, -9)), 0x08);  // up into the smallest normal
  EXPECT_EQ(f32_to_f8e4m3(15.f * 32.f), 0x7e);                 // 480 is past the largest finite
  EXPECT_EQ(f32_to_f8e4m3(1e30f), 0x7e);
  EXPECT_EQ(f32_to_f8e4m3(-std::numeric_limits<float>::infinity()), 0xfe);
  EXPECT_EQ(f32_to_f8e4m3(-0.f), 0x80);
  EXPECT_TRUE(std::isnan(f8e4m3_to_f32(f32_to_f8e4m3(std::nanf("")))));
}

// Random rows and their e4m3 storage with per-head scales, through the CPU backend's own ops.
struct F8Rows {
  Tensor k, v, scales;          // F32 rows [n, h, d], F32 [2, h]
  std::vector<uint8_t> k8, v8;  // stored bytes
};
F8Rows make_rows(Backend& be, std::mt19937& rng, int64_t n, int64_t h, int64_t d) {
  F8Rows r;
  r.k = Tensor::zeros({n, h, d});
  r.v = Tensor::zeros({n, h, d});
  std::normal_distribution<float> g(0.f, 1.f);
  for (int64_t i = 0; i < r.k.numel(); ++i) {
    const int64_t head = (i / d) % h;
    r.k.f32()[i] = g(rng) * (1 + 3 * head);  // heads of different ranges
    r.v.f32()[i] = g(rng) * 0.01f;
  }
  r.scales = Tensor::zeros({2, h});
  be.fp8_kv_scales(r.k, r.v, r.scales);
  r.k8.resize(r.k.numel());
  r.v8.resize(r.v.numel());
  be.store_kv(r.k, r.v, r.k8.data(), r.v8.data(), DType::F8E4M3, &r.scales);
  return r;
}

TEST(Fp8, ScalesAndStoredBytesFollowTheirDefinition) {
  auto be = make_cpu_backend(1);
  std::mt19937 rng(7);
  const int64_t n = 37, h = 3, d = 64;
  const F8Rows r = make_rows(*be, rng, n, h, d);
  for (int which = 0; which < 2; ++which) {
    const Tensor& x = which == 0 ? r.k : r.v;
    const auto& bytes = which == 0 ? r.k8 : r.v8;
    for (int64_t head = 0; head < h; ++head) {
      float amax = 0.f;
      for (int64_t i = 0; i < n; ++i)
        for (int64_t e = 0; e < d; ++e)
          amax = std::max(amax, std::fabs(x.f32()[(i * h + head) * d + e]));
      const float s = r.scales.f32()[which * h + head];
      EXPECT_EQ(s, amax * (kFp8Headroom / 448.f));
      // The largest value lands at 448 / headroom; every stored value is the nearest e4m3.
      float stored_max = 0.f;
      for (int64_t i = 0; i < n; ++i)
        for (int64_t e = 0; e < d; ++e) {
          const int64_t at = (i * h + head) * d + e;
          EXPECT_EQ(bytes[at], f32_to_f8e4m3(x.f32()[at] / s));
          stored_max = std::max(stored_max, std::fabs(f8e4m3_to_f32(bytes[at])));
        }
      EXPECT_NEAR(stored_max, 448.f / kFp8Headroom, 448.f / kFp8Headroom / 16);
    }
  }
  Tensor zeros = Tensor::zeros({2, h, d}), s2 = Tensor::zeros({2, h});
  be->fp8_kv_scales(zeros, zeros, s2);
  for (int64_t i = 0; i < 2 * h; ++i) EXPECT_EQ(s2.f32()[i], 1.f);
}

TEST(Fp8, AttentionOverE4m3IsAttentionOverTheValuesTheyHold) {
  auto be = make_cpu_backend(2);
  std::mt19937 rng(11);
  const int64_t h = 2, d = 64;
  // Ragged segments (one of a single row), each stored with the first one's scales.
  const F8Rows first = make_rows(*be, rng, 50, h, d);
  std::vector<F8Rows> parts;
  parts.push_back(first);
  for (int64_t n : {1, 13, 200}) {
    F8Rows p = make_rows(*be, rng, n, h, d);
    p.scales = first.scales;
    be->store_kv(p.k, p.v, p.k8.data(), p.v8.data(), DType::F8E4M3, &p.scales);
    parts.push_back(std::move(p));
  }
  std::vector<KVSegment> f8, f32;
  std::vector<Tensor> values;
  for (const auto& p : parts) {
    const int32_t n = static_cast<int32_t>(p.k.dim(0));
    f8.push_back({p.k8.data(), p.v8.data(), n, first.scales.f32()});
    Tensor kd = Tensor::zeros(p.k.shape()), vd = Tensor::zeros(p.v.shape());
    for (int64_t i = 0; i < kd.numel(); ++i) {
      const int64_t head = (i / d) % h;
      kd.f32()[i] = f8e4m3_to_f32(p.k8[i]) * first.scales.f32()[head];
      vd.f32()[i] = f8e4m3_to_f32(p.v8[i]) * first.scales.f32()[h + head];
    }
    f32.push_back({kd.raw(), vd.raw(), n});
    values.push_back(kd);
    values.push_back(vd);
  }
  for (int64_t nq : {1, 3, 40}) {
    Tensor q = Tensor::zeros({nq, h, d});
    std::normal_distribution<float> g(0.f, 0.3f);
    for (int64_t i = 0; i < q.numel(); ++i) q.f32()[i] = g(rng);
    Tensor a = Tensor::zeros({nq, h, d}), b = Tensor::zeros({nq, h, d});
    be->attention(q, f8, 0.125f, a);
    be->attention(q, f32, 0.125f, b);
    EXPECT_EQ(std::memcmp(a.raw(), b.raw(), a.nbytes()), 0) << nq << " queries";
  }
}

TEST(Fp8, PagedCacheCalibratesOncePerSequenceAndMovesBytesIntoTheStream) {
  auto be = make_cpu_backend(1);
  KVCacheConfig c;
  c.layers = 2;
  c.heads = 2;
  c.head_dim = 64;
  c.tokens_per_frame = 8;
  c.special_tokens = 6;
  c.scale_frames = 1;
  c.window = 1;
  c.dtype = DType::F8E4M3;
  PagedKVCache cache(*be, c);
  std::mt19937 rng(3);
  auto frame = [&](float range) {
    Tensor t = Tensor::zeros({8, 2, 64});
    std::uniform_real_distribution<float> u(-range, range);
    for (int64_t i = 0; i < t.numel(); ++i) t.f32()[i] = u(rng);
    return t;
  };
  std::vector<Tensor> ks;
  for (int f = 0; f < 3; ++f) {  // scale frame, window frame, then one that evicts the latter
    cache.append(1, false);
    Tensor k = frame(f == 0 ? 1.f : 3.f), v = frame(2.f);
    for (int64_t l = 0; l < 2; ++l) cache.store(l, 0, k, v);
    cache.commit();
    ks.push_back(k);
  }
  std::vector<KVSegment> segs;
  cache.segments(0, segs);
  ASSERT_EQ(segs.size(), 3u);  // scale page, window page, the stream's specials
  const float* scales = segs[0].scales;
  ASSERT_NE(scales, nullptr);
  for (const auto& s : segs) EXPECT_EQ(s.scales, scales);
  // Calibrated from frame 0 only: later frames three times its range still fit (the headroom).
  for (int64_t i = 0; i < 8 * 2 * 64; ++i) {
    const float s = scales[(i / 64) % 2];
    const float got = f8e4m3_to_f32(static_cast<const uint8_t*>(segs[1].k)[i]) * s;
    EXPECT_NEAR(got, ks[2].f32()[i], std::fabs(ks[2].f32()[i]) / 16 + s * 0x1p-9f) << i;
  }
  // The evicted frame's specials moved as bytes: they are what its page held.
  ASSERT_EQ(segs[2].tokens, 6);
  for (int64_t i = 0; i < 6 * 2 * 64; ++i) {
    const float s = scales[(i / 64) % 2];
    const float got = f8e4m3_to_f32(static_cast<const uint8_t*>(segs[2].k)[i]) * s;
    EXPECT_NEAR(got, ks[1].f32()[i], std::fabs(ks[1].f32()[i]) / 16 + s * 0x1p-9f) << i;
  }
  // A new sequence calibrates again.
  const std::vector<float> before(scales, scales + 4);
  cache.reset();
  cache.append(1, false);
  Tensor k = frame(100.f), v = frame(100.f);
  cache.store(0, 0, k, v);
  segs.clear();
  cache.segments(0, segs);
  EXPECT_GT(segs[0].scales[0], 10 * before[0]);
  EXPECT_EQ(PagedKVCache::bytes_for(c, 3) * 2, [&] {
    KVCacheConfig b = c;
    b.dtype = DType::BF16;
    return PagedKVCache::bytes_for(b, 3);
  }());
}

}  // namespace
}  // namespace lingbot
