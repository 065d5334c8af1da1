// Large copies from pageable host memory (weights at load time, often a file mapping): chunks go
// through a few pinned slots, filled on several threads while the copy engine drains the
// previous ones, so page faults, host copies and transfers overlap. Copies under 1 MiB, or all
// of them where pinned memory cannot be had, are plain pageable copies.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

namespace lingbot::cuda {

class StagedUpload {
 public:
  StagedUpload() = default;
  StagedUpload(const StagedUpload&) = delete;
  StagedUpload& operator=(const StagedUpload&) = delete;
  ~StagedUpload();
  // Queues dst[0, bytes) = src[0, bytes) on `stream`; `src` may change once this returns.
  void copy(void* dst, const void* src, size_t bytes, cudaStream_t stream);

 private:
  static constexpr int kSlots = 4;
  static constexpr size_t kChunk = size_t{16} << 20;
  bool tried_ = false;
  char* host_ = nullptr;  // kSlots pinned chunks, allocated on the first large copy
  cudaEvent_t done_[kSlots] = {};
  int next_ = 0;
};

}  // namespace lingbot::cuda
