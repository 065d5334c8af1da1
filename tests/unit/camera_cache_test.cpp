// The camera head's cache with a limit (StreamOptions::max_special_frames): the pinned frames
// stay, only the newest others are read, a speculative frame still rolls back, and memory is
// what bytes_for predicts and stops growing.
#include "cache/camera_cache.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "backend/ops.h"
#include "lingbot/error.h"

namespace lingbot {
namespace {

// One row per frame whose values are its frame id (K) and minus it (V).
Tensor rows(int first, int n, bool negate) {
  Tensor t = Tensor::zeros({n, 1, 2});
  for (int i = 0; i < n; ++i)
    t.f32()[2 * i] = t.f32()[2 * i + 1] = negate ? -(first + i) : first + i;
  return t;
}

std::vector<int> visible(const CameraCache& c, int iteration, int block) {
  std::vector<KVSegment> segs;
  c.segments(iteration, block, segs);
  std::vector<int> ids;
  for (const KVSegment& s : segs)
    for (int r = 0; r < s.tokens; ++r) {
      const float k = static_cast<const float*>(s.k)[2 * r],
                  v = static_cast<const float*>(s.v)[2 * r];
      EXPECT_EQ(k, -v);
      ids.push_back(static_cast<int>(k));
    }
  return ids;
}

void store(CameraCache& c, int first, int n) {
  for (int i = 0; i < c.iterations(); ++i)
    for (int b = 0; b < c.depth(); ++b) c.append(i, b, rows(first, n, false), rows(first, n, true));
}

TEST(CameraCache, LimitKeepsPinnedAndNewestFrames) {
  auto backend = make_cpu_backend(1);
  const CameraCacheLimit limit{.pinned = 3, .recent = 5};
  CameraCache cache(*backend, 2, 2, 1, 2, DType::F32, 4);
  cache.set_limit(limit);
  store(cache, 0, 3);  // phase 1
  for (int f = 3; f < 80; ++f) {
    cache.trim();
    const std::vector<int> before = visible(cache, 1, 1);
    store(cache, f, 1);  // speculative: rolled back every third frame
    std::vector<int> want = {0, 1, 2};
    for (int g = std::max(3, f - static_cast<int>(limit.recent)); g <= f; ++g) want.push_back(g);
    for (int i = 0; i < 2; ++i)
      for (int b = 0; b < 2; ++b) ASSERT_EQ(visible(cache, i, b), want) << "frame " << f;
    if (f % 3 == 0) {
      cache.rollback_last_frame();
      ASSERT_EQ(visible(cache, 0, 0), before) << "frame " << f;
      store(cache, f, 1);  // kept after all, so every frame counts once below
    }
    ASSERT_EQ(cache.bytes_reserved(), CameraCache::bytes_for(4, 2, DType::F32, 4, f + 1, limit))
        << "frame " << f;
  }
  const size_t flat = cache.bytes_reserved();
  for (int f = 80; f < 120; ++f) {
    cache.trim();
    store(cache, f, 1);
  }
  EXPECT_EQ(cache.bytes_reserved(), flat);
  cache.reset();
  EXPECT_EQ(cache.rows(), 0);
  EXPECT_EQ(cache.bytes_reserved(), flat);
}

TEST(CameraCache, WithoutLimitEverythingStays) {
  auto backend = make_cpu_backend(1);
  CameraCache cache(*backend, 1, 1, 1, 2, DType::F32, 4);
  store(cache, 0, 2);
  for (int f = 2; f < 30; ++f) {
    cache.trim();
    store(cache, f, 1);
    EXPECT_EQ(cache.bytes_reserved(), CameraCache::bytes_for(1, 2, DType::F32, 4, f + 1));
  }
  EXPECT_EQ(visible(cache, 0, 0).size(), 30u);
  EXPECT_THROW(cache.set_limit({.pinned = 1, .recent = 1}), Error);  // not empty
}

}  // namespace
}  // namespace lingbot
