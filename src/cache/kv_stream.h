// An append-only run of K/V rows stored in fixed-size chunks: growing never moves rows already
// written (so pointers handed to a kernel stay valid), and there is no length limit. Used for
// the special-token stream of the paged cache and for the camera head's per-frame caches.
//
// A bounded stream drops its oldest rows (drop_front); a chunk whose rows are all dropped is
// kept aside and reused for the next rows, so a stream trimmed to a fixed length allocates
// nothing once it has reached it.
#pragma once

#include <cstdint>
#include <deque>
#include <vector>

#include "backend/ops.h"

namespace lingbot {

class KVStream {
 public:
  // Rows [.., + rows) of a stream lie contiguously from k and from v.
  struct RowSpan {
    char* k;
    char* v;
    int64_t rows;
  };

  // row_elems = heads * head_dim; chunk_rows = rows per allocation.
  KVStream(Backend& backend, int64_t heads, int64_t head_dim, DType dtype, int64_t chunk_rows);

  // Appends k, v [n, heads, head_dim] (backend tensors, activation dtype).
  void append(const Tensor& k, const Tensor& v);
  // Makes room for n more rows, held from now on, and adds where they lie to `out` (oldest
  // first) for the caller to write before any work reads them.
  void grow(int64_t n, std::vector<RowSpan>& out);
  // Drops rows past `rows` (rollback). Chunks stay allocated for reuse.
  void truncate(int64_t rows);
  // Forgets the `n` oldest rows.
  void drop_front(int64_t n);
  void clear();

  int64_t rows() const { return rows_; }  // rows held (appended, minus truncated and dropped)
  // Where the oldest row lies within its chunk: a snapshot restores it (restart_at) so that the
  // rows split into the same segments as before, and attention sums them in the same order.
  int64_t head() const { return head_; }
  int64_t chunk_rows() const { return chunk_rows_; }
  // Empties the stream and places its next row at `head` (< chunk_rows) of its first chunk.
  void restart_at(int64_t head);
  // Appends segments covering the rows held, oldest first, to `out`.
  void segments(std::vector<KVSegment>& out) const;

  size_t bytes_in_use() const { return static_cast<size_t>(rows_) * row_bytes() * 2; }
  size_t bytes_reserved() const {
    return (chunks_.size() + spare_.size()) * static_cast<size_t>(chunk_rows_) * row_bytes() * 2;
  }
  size_t row_bytes() const { return static_cast<size_t>(heads_ * head_dim_) * dtype_size(dtype_); }
  // Bytes needed to hold `rows` rows (whole chunks), for memory preflight.
  size_t bytes_for(int64_t rows) const;

  // Chunks a stream allocates when `appended` rows arrive `step` at a time and, with keep > 0,
  // the oldest are dropped so that at most `keep` rows remain after each append (dropping
  // before appending, so a freed chunk is reused at once). keep = 0: nothing is dropped.
  static int64_t chunks_for(int64_t appended, int64_t keep, int64_t step, int64_t chunk_rows);

 private:
  struct Chunk {
    Tensor k, v;  // [chunk_rows, heads, head_dim]
  };
  Backend& backend_;
  int64_t heads_, head_dim_;
  DType dtype_;
  int64_t chunk_rows_;
  int64_t head_ = 0;  // position of the oldest row held within chunks_.front()
  int64_t rows_ = 0;
  std::deque<Chunk> chunks_;  // from the one holding the oldest row on
  std::vector<Chunk> spare_;  // emptied by drop_front, reused before allocating
};

}  // namespace lingbot
