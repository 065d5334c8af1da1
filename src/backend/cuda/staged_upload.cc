#include "backend/cuda/staged_upload.h"

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "backend/cuda/common.h"

namespace lingbot::cuda {

StagedUpload::~StagedUpload() {
  for (auto& e : done_) {
    if (!e) continue;
    cudaEventSynchronize(e);  // no transfer may still read the pinned slots
    cudaEventDestroy(e);
  }
  if (host_) cudaFreeHost(host_);
}

void StagedUpload::copy(void* dst, const void* src, size_t bytes, cudaStream_t stream) {
  if (!tried_) {
    tried_ = true;
    if (cudaHostAlloc(reinterpret_cast<void**>(&host_), kChunk * kSlots, cudaHostAllocDefault) !=
        cudaSuccess) {
      cudaGetLastError();
      host_ = nullptr;
    }
    if (host_)
      for (auto& e : done_) LB_CUDA(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  }
  // Small copies return at once through the driver's own staging; only large ones gain here.
  if (!host_ || bytes < (size_t{1} << 20)) {
    LB_CUDA(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream));
    return;
  }
  constexpr size_t kPiece = size_t{1} << 20;  // per thread, so page faults are taken in parallel
  for (size_t off = 0; off < bytes; off += kChunk) {
    const size_t n = std::min(kChunk, bytes - off);
    const int slot = next_;
    next_ = (next_ + 1) % kSlots;
    LB_CUDA(cudaEventSynchronize(done_[slot]));  // its previous transfer has left the slot
    char* h = host_ + slot * kChunk;
    const char* from = static_cast<const char*>(src) + off;
    const int64_t pieces = static_cast<int64_t>((n + kPiece - 1) / kPiece);
#pragma omp parallel for schedule(dynamic) if (pieces > 1)
    for (int64_t p = 0; p < pieces; ++p) {
      const size_t at = static_cast<size_t>(p) * kPiece;
      std::memcpy(h + at, from + at, std::min(kPiece, n - at));
    }
    LB_CUDA(cudaMemcpyAsync(static_cast<char*>(dst) + off, h, n, cudaMemcpyHostToDevice, stream));
    LB_CUDA(cudaEventRecord(done_[slot], stream));
  }
}

}  // namespace lingbot::cuda
