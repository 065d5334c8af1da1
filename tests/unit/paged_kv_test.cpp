// The paged cache against a plain list model of the policy (the reference): after every
// step, the tokens attention would read are exactly the ones the policy defines.
#include "cache/paged_kv.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <deque>
#include <random>
#include <utility>
#include <vector>

#include "backend/ops.h"
#include "lingbot/error.h"

namespace lingbot {
namespace {

constexpr int64_t kTokens = 8, kSpecials = 6;

// Reference policy: lists of frame ids.
struct ListModel {
  int64_t scale_frames, window;
  bool camera_only = false, cross_special = true, include_scale = true;
  int64_t max_special = 0;
  std::vector<int> scale, live, evicted, pending;
  bool deferred = false;
  int64_t stored = 0;

  void append(const std::vector<int>& ids, bool defer) {
    for (int id : ids) {
      const int64_t cap = include_scale ? scale_frames : 0;
      (static_cast<int64_t>(scale.size()) < cap ? scale : live).push_back(id);
    }
    pending = ids;
    deferred = defer;
    if (!defer) evict();
  }
  void evict() {
    while (static_cast<int64_t>(live.size()) > window) {
      if (cross_special) evicted.push_back(live.front());
      if (max_special > 0 && static_cast<int64_t>(evicted.size()) > max_special)
        evicted.erase(evicted.begin());
      live.erase(live.begin());
    }
  }
  void commit() {
    stored += static_cast<int64_t>(pending.size());
    pending.clear();
    if (deferred) evict();
  }
  void rollback() {
    for (auto it = pending.rbegin(); it != pending.rend(); ++it) {
      auto& v = !live.empty() && live.back() == *it ? live : scale;
      v.pop_back();
    }
    pending.clear();
  }
  std::vector<std::pair<int, int>> visible() const {
    std::vector<std::pair<int, int>> out;
    for (const auto* v : {&scale, &live})
      for (int f : *v)
        for (int t = 0; t < kTokens; ++t) out.push_back({f, t});
    for (int f : evicted)
      for (int t = 0; t < (camera_only ? 1 : kSpecials); ++t) out.push_back({f, t});
    std::sort(out.begin(), out.end());
    return out;
  }
};

// K row = (frame id, token index); V row = the negation, so both are checked.
Tensor frame_rows(int id, bool negate) {
  Tensor t = Tensor::zeros({kTokens, 1, 2});
  for (int i = 0; i < kTokens; ++i) {
    t.f32()[2 * i] = negate ? -id : id;
    t.f32()[2 * i + 1] = negate ? -i : i;
  }
  return t;
}

std::vector<std::pair<int, int>> read_visible(const PagedKVCache& c, int64_t layer) {
  std::vector<KVSegment> segs;
  c.segments(layer, segs);
  std::vector<std::pair<int, int>> out;
  bool v_matches_k = true;
  for (auto& s : segs) {
    const float* k = static_cast<const float*>(s.k);
    const float* v = static_cast<const float*>(s.v);
    for (int32_t r = 0; r < s.tokens; ++r) {
      v_matches_k &= k[2 * r] == -v[2 * r] && k[2 * r + 1] == -v[2 * r + 1];
      out.push_back({static_cast<int>(k[2 * r]), static_cast<int>(k[2 * r + 1])});
    }
  }
  EXPECT_TRUE(v_matches_k) << "a V row does not belong to its K row";
  std::sort(out.begin(), out.end());
  return out;
}

KVCacheConfig small_config(int64_t scale, int64_t window) {
  KVCacheConfig c;
  c.layers = 2;
  c.heads = 1;
  c.head_dim = 2;
  c.tokens_per_frame = kTokens;
  c.special_tokens = kSpecials;
  c.scale_frames = scale;
  c.window = window;
  c.stream_chunk_frames = 4;  // small chunks: many chunk boundaries
  return c;
}

void check_state(const PagedKVCache& cache, const ListModel& m, int64_t step) {
  const auto want = m.visible();
  for (int64_t l = 0; l < cache.config().layers; ++l) {
    ASSERT_EQ(read_visible(cache, l), want) << "step " << step << " layer " << l;
  }
  const KVCacheStats s = cache.stats();
  ASSERT_EQ(s.stored_frames, m.stored) << "step " << step;
  ASSERT_EQ(s.scale_pages, static_cast<int64_t>(m.scale.size()));
  ASSERT_EQ(s.live_pages, static_cast<int64_t>(m.live.size()));
  ASSERT_EQ(s.scale_pages + s.live_pages + s.free_pages, PagedKVCache::pool_pages(cache.config()))
      << "pages leaked at step " << step;
}

// Runs `steps` random operations: keyframes, non-keyframes, adaptive decisions, resets.
void random_walk(KVCacheConfig cfg, int64_t steps, double reset_p, uint32_t seed) {
  auto backend = make_cpu_backend(1);
  PagedKVCache cache(*backend, cfg);
  ListModel m{cfg.scale_frames,         cfg.window,
              cfg.camera_only,          cfg.cross_frame_special,
              cfg.include_scale_frames, cfg.max_special_frames};
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> u(0, 1);
  int next_id = 1;
  for (int64_t step = 0; step < steps; ++step) {
    if (u(rng) < reset_p) {
      cache.reset();
      m = ListModel{cfg.scale_frames,         cfg.window,
                    cfg.camera_only,          cfg.cross_frame_special,
                    cfg.include_scale_frames, cfg.max_special_frames};
      check_state(cache, m, step);
      continue;
    }
    // A fresh sequence starts with its scale frames in one step (phase 1).
    int64_t n = 1;
    if (m.stored == 0 && cfg.scale_frames > 1)
      n = 1 + static_cast<int64_t>(rng() % cfg.scale_frames);
    const double r = u(rng);
    const bool defer = r >= 0.5;           // non-keyframe or adaptive
    const bool keep = !defer || r >= 0.8;  // adaptive: decided after the pass
    std::vector<int> ids;
    cache.append(n, defer);
    for (int64_t i = 0; i < n; ++i) {
      ids.push_back(next_id);
      for (int64_t l = 0; l < cfg.layers; ++l)
        cache.store(l, i, frame_rows(next_id, false), frame_rows(next_id, true));
      ++next_id;
    }
    m.append(ids, defer);
    check_state(cache, m, step);  // what this step's attention reads
    if (keep) {
      cache.commit();
      m.commit();
    } else {
      cache.rollback_last_frame();
      m.rollback();
    }
    check_state(cache, m, step);
  }
}

TEST(PagedKV, MatchesListModelOver100kRandomSteps) {
  random_walk(small_config(3, 5), 100000, 1.0 / 100, 1);
}

TEST(PagedKV, MatchesListModelOnALongSequenceWithoutReset) {
  random_walk(small_config(2, 4), 3000, 0.0, 2);
}

TEST(PagedKV, CameraOnlyKeepsOneTokenPerEvictedFrame) {
  KVCacheConfig c = small_config(2, 3);
  c.camera_only = true;
  random_walk(c, 20000, 1.0 / 300, 3);
}

TEST(PagedKV, WithoutScaleFramesEverythingSlides) {
  KVCacheConfig c = small_config(2, 3);
  c.include_scale_frames = false;
  random_walk(c, 20000, 1.0 / 300, 4);
}

TEST(PagedKV, WithoutCrossFrameSpecialsEvictedFramesVanish) {
  KVCacheConfig c = small_config(2, 3);
  c.cross_frame_special = false;
  random_walk(c, 20000, 1.0 / 300, 5);
}

// Capped specials: only the newest evicted frames stay visible, whatever the chunk boundaries.
TEST(PagedKV, SpecialCapKeepsTheNewestEvictedFrames) {
  for (int64_t cap : {1, 3, 4, 5, 9}) {
    KVCacheConfig c = small_config(2, 3);
    c.max_special_frames = cap;
    random_walk(c, 5000, 1.0 / 500, 10 + static_cast<uint32_t>(cap));
  }
  KVCacheConfig c = small_config(2, 3);
  c.max_special_frames = 2;
  c.camera_only = true;
  random_walk(c, 5000, 1.0 / 500, 20);
}

// Once the cap is reached the stream reuses the chunks it dropped: memory stays flat, and the
// preflight formula predicts it exactly at every frame.
TEST(PagedKV, SpecialCapKeepsMemoryFlat) {
  auto backend = make_cpu_backend(1);
  for (int64_t cap : {1, 4, 6, 7}) {
    KVCacheConfig c = small_config(2, 3);  // chunks of 4 frames
    c.max_special_frames = cap;
    PagedKVCache cache(*backend, c);
    size_t flat = 0;
    for (int f = 0; f < 200; ++f) {
      cache.append(1, false);
      for (int l = 0; l < 2; ++l) cache.store(l, 0, frame_rows(f, false), frame_rows(f, true));
      cache.commit();
      const KVCacheStats s = cache.stats();
      ASSERT_EQ(s.bytes_reserved * c.layers, PagedKVCache::bytes_for(c, f + 1)) << cap << " " << f;
      ASSERT_EQ(s.stream_frames, std::clamp<int64_t>(f + 1 - 5, 0, cap));
      ASSERT_EQ(s.special_tokens, (s.scale_pages + s.live_pages + s.stream_frames) * kSpecials);
      if (f == 5 + cap + 2 * 4) flat = s.bytes_reserved;  // cap reached, a chunk's worth later
      if (flat) ASSERT_EQ(s.bytes_reserved, flat) << cap << " " << f;
    }
    // Whole chunks: at most one beyond what the cap needs.
    const size_t chunk = 4 * kSpecials * 2 * 2 * sizeof(float);
    EXPECT_LE(flat - (2 + 3 + 1) * kTokens * 2 * 2 * sizeof(float), ((cap + 3) / 4 + 1) * chunk);
  }
}

TEST(KVStream, ChunksForMatchesASimulatedStream) {
  auto backend = make_cpu_backend(1);
  for (int64_t chunk : {1, 3, 4, 12})
    for (int64_t step : {1, 2, 6})
      for (int64_t keep : {0, 1, 5, 6, 12, 13}) {
        if (keep % step) continue;
        KVStream s(*backend, 1, 2, DType::F32, chunk);
        const Tensor rows = Tensor::zeros({step, 1, 2});
        for (int64_t n = 1; n <= 60; ++n) {
          if (keep) s.drop_front(std::max<int64_t>(s.rows() + step - keep, 0));
          s.append(rows, rows);
          ASSERT_EQ(s.bytes_reserved() / (chunk * 2 * 2 * sizeof(float)),
                    static_cast<size_t>(KVStream::chunks_for(n * step, keep, step, chunk)))
              << "chunk " << chunk << " step " << step << " keep " << keep << " n " << n;
        }
      }
}

// grow() hands out each new row once, in order, in pieces that never cross a chunk, and the
// stream holds them at once; dropped rows' chunks come back for later rows.
TEST(KVStream, GrowHandsOutEachRowOnceWithinChunks) {
  auto backend = make_cpu_backend(1);
  KVStream s(*backend, 1, 2, DType::F32, 4);
  std::vector<KVStream::RowSpan> spans;
  s.grow(3, spans);
  s.grow(7, spans);
  ASSERT_EQ(s.rows(), 10);
  int64_t rows = 0;
  for (const KVStream::RowSpan& sp : spans) {
    ASSERT_GT(sp.rows, 0);
    for (int64_t r = 0; r < sp.rows; ++r, ++rows) {
      float* k = reinterpret_cast<float*>(sp.k + r * s.row_bytes());
      float* v = reinterpret_cast<float*>(sp.v + r * s.row_bytes());
      k[0] = k[1] = static_cast<float>(rows);
      v[0] = v[1] = -static_cast<float>(rows);
    }
  }
  EXPECT_EQ(rows, 10);
  EXPECT_EQ(spans.size(), 4u);  // 3 | 1 + 4 + 2: the second call crosses two chunk boundaries
  std::vector<KVSegment> segs;
  s.segments(segs);
  int64_t seen = 0;
  for (const KVSegment& g : segs)
    for (int r = 0; r < g.tokens; ++r, ++seen) {
      EXPECT_EQ(static_cast<const float*>(g.k)[2 * r], static_cast<float>(seen));
      EXPECT_EQ(static_cast<const float*>(g.v)[2 * r + 1], -static_cast<float>(seen));
    }
  EXPECT_EQ(seen, 10);
  const size_t reserved = s.bytes_reserved();
  s.drop_front(8);
  spans.clear();
  s.grow(6, spans);  // the two freed chunks take these rows
  EXPECT_EQ(s.rows(), 8);
  EXPECT_EQ(s.bytes_reserved(), reserved);
}

TEST(PagedKV, EvictsOldestWindowFrameBeforeAKeyframeAttends) {
  auto backend = make_cpu_backend(1);
  PagedKVCache cache(*backend, small_config(2, 3));
  for (int f = 0; f < 5; ++f) {  // 2 scale + 3 window: full
    cache.append(1, false);
    for (int l = 0; l < 2; ++l) cache.store(l, 0, frame_rows(f, false), frame_rows(f, true));
    cache.commit();
  }
  EXPECT_EQ(cache.stats().free_pages, 1);
  // Keyframe 5: frame 2 (oldest window frame) is evicted before attention.
  cache.append(1, false);
  for (int l = 0; l < 2; ++l) cache.store(l, 0, frame_rows(5, false), frame_rows(5, true));
  auto vis = read_visible(cache, 0);
  EXPECT_EQ(std::count_if(vis.begin(), vis.end(), [](auto& p) { return p.first == 2; }), kSpecials);
  cache.commit();
  // Non-keyframe 6 sees the window plus itself (one more frame than a keyframe), then vanishes.
  cache.append(1, true);
  for (int l = 0; l < 2; ++l) cache.store(l, 0, frame_rows(6, false), frame_rows(6, true));
  EXPECT_EQ(cache.stats().live_pages, 4);
  EXPECT_EQ(cache.stats().free_pages, 0);
  cache.rollback_last_frame();
  vis = read_visible(cache, 0);
  EXPECT_EQ(std::count_if(vis.begin(), vis.end(), [](auto& p) { return p.first == 6; }), 0);
  EXPECT_EQ(cache.stored_frames(), 6);
}

TEST(PagedKV, SteadyStateAllocatesNoNewPages) {
  auto backend = make_cpu_backend(1);
  KVCacheConfig c = small_config(2, 3);
  c.cross_frame_special = false;
  PagedKVCache cache(*backend, c);
  const size_t reserved = cache.stats().bytes_reserved;
  for (int f = 0; f < 50; ++f) {
    cache.append(1, false);
    for (int l = 0; l < 2; ++l) cache.store(l, 0, frame_rows(f, false), frame_rows(f, true));
    cache.commit();
  }
  EXPECT_EQ(cache.stats().bytes_reserved, reserved);
}

TEST(PagedKV, PreflightMatchesReservedBytes) {
  auto backend = make_cpu_backend(1);
  KVCacheConfig c = small_config(2, 3);
  PagedKVCache cache(*backend, c);
  for (int f = 0; f < 40; ++f) {
    cache.append(1, false);
    for (int l = 0; l < 2; ++l) cache.store(l, 0, frame_rows(f, false), frame_rows(f, true));
    cache.commit();
    EXPECT_EQ(cache.stats().bytes_reserved * c.layers, PagedKVCache::bytes_for(c, f + 1)) << f;
  }
}

TEST(PagedKV, RejectsMisuse) {
  auto backend = make_cpu_backend(1);
  PagedKVCache cache(*backend, small_config(2, 3));
  EXPECT_THROW(cache.commit(), Error);
  EXPECT_THROW(cache.rollback_last_frame(), Error);
  EXPECT_THROW(cache.append(7, false), Error);  // pool holds 2 + 3 + 1 pages
  cache.append(1, false);
  EXPECT_THROW(cache.append(1, false), Error);
  EXPECT_THROW(cache.rollback_last_frame(), Error);  // a keyframe step was already evicted for
  EXPECT_THROW(cache.store(0, 0, Tensor::zeros({3, 1, 2}), Tensor::zeros({3, 1, 2})), Error);
  KVCacheConfig bad = small_config(2, 0);
  EXPECT_THROW(PagedKVCache(*backend, bad), Error);
}

}  // namespace
}  // namespace lingbot
