// The paged KV cache of the aggregator's global (cross-frame) layers.
//
// A page holds one frame: all its tokens (specials first, then patches), K and V, for every
// layer. The first `scale_frames` stored frames keep their pages forever; later frames live in a
// sliding window of `window` pages, the oldest evicted (its page back on the free list) when a
// new keyframe arrives. An evicted frame's special tokens move into an append-only stream that
// has no length limit unless max_special_frames caps it (then the oldest evicted frames' specials
// are dropped, a departure from the reference for bounded memory). Attention reads the pages and
// the stream in place (see segments()).
//
// Life of a step (one call of the model over 1 or more frames), the same for every layer:
//   append(n, defer)  plan pages for n new frames; evict now unless `defer`
//   store(layer, ...) write each new frame's K/V into its page (per layer, as layers run)
//   segments(layer)   what that layer's attention reads
//   commit()          keep the frames (runs a deferred eviction), or
//   rollback_last_frame()  forget them (non-keyframes): nothing of them persists.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <vector>

#include "backend/ops.h"
#include "cache/kv_stream.h"

namespace lingbot {

struct KVCacheConfig {
  int64_t layers = 24;
  int64_t heads = 16;
  int64_t head_dim = 64;
  int64_t tokens_per_frame = 0;  // P = special_tokens + patches
  int64_t special_tokens = 6;    // camera, 4 registers, scale
  int64_t scale_frames = 8;
  int64_t window = 64;
  bool cross_frame_special = true;   // keep evicted frames' specials visible
  bool camera_only = false;          // ... but only their camera token
  bool include_scale_frames = true;  // false: scale frames are evicted like the rest
  // Storage: the compute dtype (F32 CPU, BF16 GPU), or F8E4M3 with per-head scales per layer,
  // set from the first frame each layer stores (see Backend::fp8_kv_scales).
  DType dtype = DType::F32;
  int64_t stream_chunk_frames = 256;  // special-stream growth step
  int64_t max_special_frames = 0;     // > 0: the stream keeps only this many newest evicted frames
};

// Counters of one layer (all layers hold the same pages), for --cache-stats and tests.
struct KVCacheStats {
  int64_t stored_frames = 0;  // committed frames = 3D RoPE time index of the next frame
  int64_t scale_pages = 0;
  int64_t live_pages = 0;  // window pages, pending frames included
  int64_t free_pages = 0;
  int64_t special_tokens = 0;  // special tokens attention sees (resident frames + stream)
  size_t bytes_in_use = 0;     // K+V bytes of pages and stream rows in use, one layer
  size_t bytes_reserved = 0;   // K+V bytes allocated, one layer
  size_t stream_bytes_in_use = 0, stream_bytes_reserved = 0;  // the special stream's part
  int64_t stream_frames = 0;  // evicted frames whose specials the stream holds
};

class PagedKVCache {
 public:
  PagedKVCache(Backend& backend, const KVCacheConfig& config);

  const KVCacheConfig& config() const { return cfg_; }
  int64_t stored_frames() const { return stored_frames_; }
  int64_t pending_frames() const { return static_cast<int64_t>(pending_.size()); }

  void append(int64_t frames, bool defer_eviction);
  // k, v: [tokens_per_frame, heads, head_dim] of new frame `index` (0-based within the step).
  void store(int64_t layer, int64_t index, const Tensor& k, const Tensor& v);
  // Where store would put frame `index`'s K/V in `layer`, for an op that writes them there
  // itself (Backend::split_qkv's `into`); false while the layer's e4m3 scales are still to be
  // set from its first rows, which only store does.
  bool destination(int64_t layer, int64_t index, KVDestination::Frame& out) const;
  void commit();
  void rollback_last_frame();
  void reset();

  // Appends this layer's visible K/V runs: scale pages, window pages (oldest first, pending
  // frames last), then the special stream.
  void segments(int64_t layer, std::vector<KVSegment>& out) const;

  int64_t stream_rows() const { return streams_.empty() ? 0 : streams_[0].rows(); }

  KVCacheStats stats() const;

  // A session snapshot's view (stream/session_snapshot.cpp): which pages hold which frames, and
  // where their bytes are. Between steps only.
  struct Layout {
    std::vector<int32_t> scale, live, free;  // pages in use, oldest first; the free list's order
    int64_t stored_frames = 0;
    std::vector<bool> calibrated;  // e4m3 storage: each layer's scales are set
    int64_t stream_head = 0;       // KVStream::head of every layer's special stream
  };
  Layout layout() const;
  void* page_k(int64_t layer, int32_t page) const { return page_ptr(k_pool_.at(layer), page); }
  void* page_v(int64_t layer, int32_t page) const { return page_ptr(v_pool_.at(layer), page); }
  size_t page_size() const { return page_bytes(); }  // one page of K (or V), one layer
  KVStream& stream(int64_t layer) { return streams_.at(layer); }
  const KVStream& stream(int64_t layer) const { return streams_.at(layer); }
  // e4m3 storage: the layer's [2, heads] K and V scales; null otherwise.
  const Tensor* fp8_scales(int64_t layer) const {
    return scales_.empty() ? nullptr : &scales_.at(layer);
  }
  // Puts a saved layout into this cache, emptied first: the page lists and counters as they
  // were, every stream empty from its saved head. The caller then writes the pages' bytes, grows
  // the streams by their rows and writes those, and sets the scales. Throws on a layout that
  // does not fit this cache's pool (the pages must be each of 0 .. pool-1 exactly once).
  void restore(const Layout& layout);

  // Bytes all layers need to hold `frames` stored frames (pool + special stream, the stream's
  // cap included), for preflight.
  static size_t bytes_for(const KVCacheConfig& config, int64_t frames);
  static int64_t pool_pages(const KVCacheConfig& config) {
    return config.scale_frames + config.window + 1;
  }

 private:
  size_t page_bytes() const;
  void evict_oldest();
  void* page_ptr(const Tensor& pool, int32_t page) const;

  Backend& backend_;
  KVCacheConfig cfg_;
  std::vector<Tensor> k_pool_, v_pool_;  // per layer [pages, P, H, D]
  std::vector<KVStream> streams_;        // per layer, specials of evicted frames
  std::vector<Tensor> scales_;           // e4m3 storage: per layer [2, H] K and V scales
  std::vector<bool> calibrated_;         // ... set from this sequence's first stored frame
  std::deque<int32_t> scale_, live_;     // pages of stored (and pending) frames
  std::vector<int32_t> free_;            // LIFO: the last freed page is reused first
  struct Pending {
    int32_t page;
    bool to_scale;
  };
  std::vector<Pending> pending_;
  bool deferred_ = false;
  int64_t stored_frames_ = 0;
};

}  // namespace lingbot
