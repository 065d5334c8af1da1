#include "cache/paged_kv.h"

#include <algorithm>

#include "lingbot/error.h"

namespace lingbot {

PagedKVCache::PagedKVCache(Backend& backend, const KVCacheConfig& config)
    : backend_(backend), cfg_(config) {
  LINGBOT_CHECK(cfg_.layers > 0 && cfg_.heads > 0 && cfg_.head_dim > 0,
                "KV cache: layers, heads and head_dim must be positive");
  LINGBOT_CHECK(cfg_.tokens_per_frame > cfg_.special_tokens && cfg_.special_tokens >= 1,
                "KV cache: a frame needs special tokens and at least one patch");
  LINGBOT_CHECK(cfg_.scale_frames >= 0, "KV cache: scale frames must be >= 0");
  LINGBOT_CHECK(cfg_.window >= 1, "KV cache: the sliding window must hold at least one frame");
  LINGBOT_CHECK(cfg_.max_special_frames >= 0, "KV cache: the special-frame cap must be >= 0");
  const int64_t pages = pool_pages(cfg_);
  for (int64_t l = 0; l < cfg_.layers; ++l) {
    k_pool_.push_back(
        backend_.alloc({pages, cfg_.tokens_per_frame, cfg_.heads, cfg_.head_dim}, cfg_.dtype));
    v_pool_.push_back(
        backend_.alloc({pages, cfg_.tokens_per_frame, cfg_.heads, cfg_.head_dim}, cfg_.dtype));
    const int64_t per_frame = cfg_.camera_only ? 1 : cfg_.special_tokens;
    streams_.emplace_back(backend_, cfg_.heads, cfg_.head_dim, cfg_.dtype,
                          per_frame * cfg_.stream_chunk_frames);
    if (cfg_.dtype == DType::F8E4M3) scales_.push_back(backend_.alloc({2, cfg_.heads}, DType::F32));
  }
  reset();
}

void PagedKVCache::reset() {
  scale_.clear();
  live_.clear();
  pending_.clear();
  free_.clear();
  // Pop order from the back: page 0 first.
  for (int32_t p = static_cast<int32_t>(pool_pages(cfg_)) - 1; p >= 0; --p) free_.push_back(p);
  for (auto& s : streams_) s.clear();
  calibrated_.assign(scales_.size(), false);
  deferred_ = false;
  stored_frames_ = 0;
}

size_t PagedKVCache::page_bytes() const {
  return static_cast<size_t>(cfg_.tokens_per_frame * cfg_.heads * cfg_.head_dim) *
         dtype_size(cfg_.dtype);
}

void* PagedKVCache::page_ptr(const Tensor& pool, int32_t page) const {
  return static_cast<char*>(pool.raw()) + static_cast<size_t>(page) * page_bytes();
}

void PagedKVCache::append(int64_t frames, bool defer_eviction) {
  LINGBOT_CHECK(pending_.empty(),
                "KV cache: append before the previous step was committed or rolled back");
  LINGBOT_CHECK(frames >= 1 && frames <= static_cast<int64_t>(free_.size()),
                "KV cache: a step of " + std::to_string(frames) +
                    " frames does not fit the pool of " + std::to_string(pool_pages(cfg_)) +
                    " pages (scale frames + window + 1)");
  const int64_t scale_cap = cfg_.include_scale_frames ? cfg_.scale_frames : 0;
  for (int64_t i = 0; i < frames; ++i) {
    const int32_t page = free_.back();
    free_.pop_back();
    const bool to_scale = static_cast<int64_t>(scale_.size()) < scale_cap;
    (to_scale ? scale_ : live_).push_back(page);
    pending_.push_back({page, to_scale});
  }
  deferred_ = defer_eviction;
  if (!deferred_)
    while (static_cast<int64_t>(live_.size()) > cfg_.window) evict_oldest();
}

void PagedKVCache::evict_oldest() {
  const int32_t page = live_.front();
  live_.pop_front();
  if (cfg_.cross_frame_special) {
    const int64_t rows = cfg_.camera_only ? 1 : cfg_.special_tokens;
    // Eviction only runs on frames that are kept, so the dropped rows never need to come back.
    const int64_t cap = cfg_.max_special_frames * rows;
    // The rows move as they are stored, every layer's in one launch.
    std::vector<ByteRange> moves;
    std::vector<KVStream::RowSpan> spans;
    for (int64_t l = 0; l < cfg_.layers; ++l) {
      if (cap > 0) streams_[l].drop_front(std::max<int64_t>(streams_[l].rows() + rows - cap, 0));
      spans.clear();
      streams_[l].grow(rows, spans);
      const size_t row = streams_[l].row_bytes();
      const char* k = static_cast<const char*>(page_ptr(k_pool_[l], page));
      const char* v = static_cast<const char*>(page_ptr(v_pool_[l], page));
      for (const KVStream::RowSpan& s : spans) {
        const size_t bytes = static_cast<size_t>(s.rows) * row;
        moves.push_back({k, s.k, bytes});
        moves.push_back({v, s.v, bytes});
        k += bytes;
        v += bytes;
      }
    }
    backend_.copy_ranges(moves);
  }
  free_.push_back(page);
}

void PagedKVCache::store(int64_t layer, int64_t index, const Tensor& k, const Tensor& v) {
  const int64_t rows = cfg_.tokens_per_frame * cfg_.heads * cfg_.head_dim;
  LINGBOT_CHECK(k.numel() == rows && v.numel() == rows,
                "KV cache: a frame's K/V must be [tokens_per_frame, heads, head_dim], got " +
                    shape_str(k.shape()));
  KVDestination::Frame to;
  if (!destination(layer, index, to)) {  // the layer's first frame sets its e4m3 scales
    backend_.fp8_kv_scales(k.reshape({cfg_.tokens_per_frame, cfg_.heads, cfg_.head_dim}),
                           v.reshape({cfg_.tokens_per_frame, cfg_.heads, cfg_.head_dim}),
                           scales_[layer]);
    calibrated_[layer] = true;
    destination(layer, index, to);
  }
  backend_.store_kv(k, v, to.k, to.v, cfg_.dtype, to.scales);
}

bool PagedKVCache::destination(int64_t layer, int64_t index, KVDestination::Frame& out) const {
  LINGBOT_CHECK(layer >= 0 && layer < cfg_.layers && index >= 0 && index < pending_frames(),
                "KV cache: store outside the current step");
  if (!scales_.empty() && !calibrated_[layer]) return false;
  const int32_t page = pending_[index].page;
  out.k = page_ptr(k_pool_[layer], page);
  out.v = page_ptr(v_pool_[layer], page);
  out.scales = scales_.empty() ? nullptr : &scales_[layer];
  return true;
}

void PagedKVCache::commit() {
  LINGBOT_CHECK(!pending_.empty(), "KV cache: commit without a pending step");
  stored_frames_ += pending_frames();
  pending_.clear();
  if (deferred_)
    while (static_cast<int64_t>(live_.size()) > cfg_.window) evict_oldest();
  deferred_ = false;
}

void PagedKVCache::rollback_last_frame() {
  LINGBOT_CHECK(!pending_.empty(), "KV cache: rollback without a pending step");
  // Undo in reverse order of append; eviction never ran for a deferred step, so the pages of
  // the step are the newest of their deques.
  LINGBOT_CHECK(deferred_,
                "KV cache: only a step appended with deferred eviction can be rolled back");
  for (auto it = pending_.rbegin(); it != pending_.rend(); ++it) {
    auto& dq = it->to_scale ? scale_ : live_;
    dq.pop_back();
    free_.push_back(it->page);
  }
  pending_.clear();
  deferred_ = false;
}

void PagedKVCache::segments(int64_t layer, std::vector<KVSegment>& out) const {
  const int32_t tokens = static_cast<int32_t>(cfg_.tokens_per_frame);
  const size_t first = out.size();
  for (const auto* dq : {&scale_, &live_})
    for (int32_t page : *dq)
      out.push_back({page_ptr(k_pool_[layer], page), page_ptr(v_pool_[layer], page), tokens});
  streams_[layer].segments(out);
  if (!scales_.empty())
    for (size_t i = first; i < out.size(); ++i) out[i].scales = scales_[layer].f32();
}

KVCacheStats PagedKVCache::stats() const {
  KVCacheStats s;
  s.stored_frames = stored_frames_;
  s.scale_pages = static_cast<int64_t>(scale_.size());
  s.live_pages = static_cast<int64_t>(live_.size());
  s.free_pages = static_cast<int64_t>(free_.size());
  s.special_tokens = (s.scale_pages + s.live_pages) * cfg_.special_tokens + streams_[0].rows();
  s.bytes_in_use = static_cast<size_t>(s.scale_pages + s.live_pages) * page_bytes() * 2 +
                   streams_[0].bytes_in_use();
  s.bytes_reserved =
      static_cast<size_t>(pool_pages(cfg_)) * page_bytes() * 2 + streams_[0].bytes_reserved();
  s.stream_bytes_in_use = streams_[0].bytes_in_use();
  s.stream_bytes_reserved = streams_[0].bytes_reserved();
  s.stream_frames = streams_[0].rows() / (cfg_.camera_only ? 1 : cfg_.special_tokens);
  return s;
}

PagedKVCache::Layout PagedKVCache::layout() const {
  LINGBOT_CHECK(pending_.empty(), "KV cache: a snapshot between steps only");
  Layout l;
  l.scale.assign(scale_.begin(), scale_.end());
  l.live.assign(live_.begin(), live_.end());
  l.free = free_;
  l.stored_frames = stored_frames_;
  l.calibrated = calibrated_;
  l.stream_head = streams_[0].head();
  return l;
}

void PagedKVCache::restore(const Layout& l) {
  reset();
  const int64_t pages = pool_pages(cfg_);
  const int64_t scale_cap = cfg_.include_scale_frames ? cfg_.scale_frames : 0;
  LINGBOT_CHECK(static_cast<int64_t>(l.scale.size()) <= scale_cap &&
                    static_cast<int64_t>(l.live.size()) <= cfg_.window,
                "KV cache: the saved pages exceed the scale frames or the window");
  LINGBOT_CHECK(static_cast<int64_t>(l.scale.size() + l.live.size() + l.free.size()) == pages,
                "KV cache: the saved pages do not make up the pool of " + std::to_string(pages));
  std::vector<bool> seen(static_cast<size_t>(pages), false);
  for (const auto* list : {&l.scale, &l.live, &l.free})
    for (int32_t p : *list) {
      LINGBOT_CHECK(p >= 0 && p < pages && !seen[p],
                    "KV cache: a saved page list repeats a page "
                    "or names one outside the pool");
      seen[p] = true;
    }
  LINGBOT_CHECK(l.calibrated.size() == scales_.size(),
                "KV cache: the saved scales are not those of this storage dtype");
  LINGBOT_CHECK(l.stored_frames >= static_cast<int64_t>(l.scale.size() + l.live.size()),
                "KV cache: fewer stored frames than pages in use");
  scale_.assign(l.scale.begin(), l.scale.end());
  live_.assign(l.live.begin(), l.live.end());
  free_ = l.free;
  calibrated_ = l.calibrated;
  stored_frames_ = l.stored_frames;
  for (auto& s : streams_) s.restart_at(l.stream_head);
}

size_t PagedKVCache::bytes_for(const KVCacheConfig& c, int64_t frames) {
  const size_t row = static_cast<size_t>(c.heads * c.head_dim) * dtype_size(c.dtype) * 2;  // K+V
  const size_t pool = static_cast<size_t>(pool_pages(c) * c.tokens_per_frame) * row;
  const int64_t resident =
      std::min<int64_t>(frames, (c.include_scale_frames ? c.scale_frames : 0) + c.window);
  const int64_t evicted = c.cross_frame_special ? frames - resident : 0;
  const int64_t per_frame = c.camera_only ? 1 : c.special_tokens;
  const int64_t chunk = per_frame * c.stream_chunk_frames;
  const int64_t keep = c.max_special_frames * per_frame;
  const int64_t stream_rows =
      KVStream::chunks_for(evicted * per_frame, keep, per_frame, chunk) * chunk;
  return (pool + static_cast<size_t>(stream_rows) * row) * static_cast<size_t>(c.layers);
}

}  // namespace lingbot
