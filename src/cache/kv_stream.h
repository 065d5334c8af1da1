// An append-only run of K/V rows stored in fixed-size chunks: growing never moves rows already
// written (so pointers handed to a kernel stay valid), and there is no length limit. Used for
// the special-token stream of the paged cache and for the camera head's per-frame caches.
#pragma once

#include <cstdint>
#include <vector>

#include "backend/ops.h"

namespace lingbot {

class KVStream {
 public:
  // row_elems = heads * head_dim; chunk_rows = rows per allocation.
  KVStream(Backend& backend, int64_t heads, int64_t head_dim, DType dtype, int64_t chunk_rows);

  // Appends k, v [n, heads, head_dim] (backend tensors, activation dtype).
  void append(const Tensor& k, const Tensor& v);
  // Drops rows past `rows` (rollback). Chunks stay allocated for reuse.
  void truncate(int64_t rows);
  void clear() { truncate(0); }

  int64_t rows() const { return rows_; }
  // Appends segments covering rows [0, rows()) to `out`.
  void segments(std::vector<KVSegment>& out) const;

  size_t bytes_in_use() const { return static_cast<size_t>(rows_) * row_bytes() * 2; }
  size_t bytes_reserved() const { return chunks_.size() * static_cast<size_t>(chunk_rows_) * row_bytes() * 2; }
  // Bytes needed to hold `rows` rows (whole chunks), for memory preflight.
  size_t bytes_for(int64_t rows) const;

 private:
  size_t row_bytes() const { return static_cast<size_t>(heads_ * head_dim_) * dtype_size(dtype_); }
  struct Chunk {
    Tensor k, v;  // [chunk_rows, heads, head_dim]
  };
  Backend& backend_;
  int64_t heads_, head_dim_;
  DType dtype_;
  int64_t chunk_rows_;
  int64_t rows_ = 0;
  std::vector<Chunk> chunks_;
};

}  // namespace lingbot
