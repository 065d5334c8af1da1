// Device memory: tensors come from the stream-ordered pool (cudaMallocAsync) with the release
// threshold raised, so freeing and reallocating between frames recycles the pool instead of
// returning memory to the driver (and instead of cudaFree's implicit device synchronisation).
#include <algorithm>
#include <cstring>

#include "backend/cuda/common.h"

namespace lingbot::cuda {

void fail(const char* what, const char* detail, const char* file, int line) {
  throw Error(std::string("CUDA error: ") + what + " failed: " + detail + " (" + file + ":" +
              std::to_string(line) + ")");
}

Elt elt_of(DType t, const char* what) {
  switch (t) {
    case DType::F32:
      return kF32;
    case DType::BF16:
      return kBF16;
    case DType::F16:
      return kF16;
    default:
      break;
  }
  throw Error(std::string("cuda backend: ") + what + " has dtype " + dtype_name(t) +
              "; only F32, BF16 and F16 are supported here");
}

void* device_malloc(Context& ctx, size_t bytes) {
  void* p = nullptr;
  const bool side = ctx.step.capturing();
  cudaError_t e = cudaMallocAsync(&p, bytes, side ? ctx.alloc_stream : ctx.stream);
  if (e == cudaSuccess && side) e = cudaStreamSynchronize(ctx.alloc_stream);
  if (e != cudaSuccess) {
    cudaGetLastError();  // reset the last-error state so the next launch check is not confused
    size_t free_b = 0, total_b = 0;
    cudaMemGetInfo(&free_b, &total_b);
    throw Error("out of GPU memory allocating " + std::to_string(bytes) + " bytes (" +
                std::to_string(free_b >> 20) + " MiB free of " + std::to_string(total_b >> 20) +
                " MiB): " + cudaGetErrorString(e));
  }
  if (side) ctx.step.note_allocation(bytes);
  return p;
}

void device_free(Context& ctx, void* p) {
  if (!p) return;
  if (ctx.step.capturing())
    ctx.step.defer_free(p);  // recorded work not yet launched may still read it
  else
    cudaFreeAsync(p, ctx.stream);  // ordered after the work already queued that uses it
}

void* Scratch::get(size_t bytes, cudaStream_t) {
  if (bytes <= cap_ && ptr_) return ptr_;
  release();
  const size_t want = std::max(bytes, cap_ + cap_ / 2);
  ptr_ = device_malloc(*ctx_, want);
  cap_ = want;
  return ptr_;
}

void Scratch::release() {
  device_free(*ctx_, ptr_);
  ptr_ = nullptr;
  cap_ = 0;
}

UploadRing::~UploadRing() {
  for (auto& e : done_)
    if (e) cudaEventDestroy(e);
  if (host_) cudaFreeHost(host_);
  if (dev_) cudaFree(dev_);
}

void UploadRing::grow(size_t bytes, cudaStream_t stream) {
  LB_CUDA(cudaStreamSynchronize(stream));
  if (host_) LB_CUDA(cudaFreeHost(host_));
  if (dev_) LB_CUDA(cudaFree(dev_));
  host_ = dev_ = nullptr;
  cap_ = std::max<size_t>(4096, ((bytes + 255) / 256) * 256 * 2);
  LB_CUDA(cudaHostAlloc(reinterpret_cast<void**>(&host_), cap_ * kSlots, cudaHostAllocDefault));
  LB_CUDA(cudaMalloc(reinterpret_cast<void**>(&dev_), cap_ * kSlots));
  for (auto& e : done_)
    if (!e) LB_CUDA(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
}

void* UploadRing::put(const void* data, size_t bytes, cudaStream_t stream) {
  if (bytes > cap_) grow(bytes, stream);
  const int slot = next_;
  next_ = (next_ + 1) % kSlots;
  // The slot's previous copy must have left the pinned buffer before we overwrite it; with
  // kSlots slots this only waits when the host runs more than a frame ahead of the GPU.
  LB_CUDA(cudaEventSynchronize(done_[slot]));
  char* h = host_ + slot * cap_;
  char* d = dev_ + slot * cap_;
  std::memcpy(h, data, bytes);
  LB_CUDA(cudaMemcpyAsync(d, h, bytes, cudaMemcpyHostToDevice, stream));
  LB_CUDA(cudaEventRecord(done_[slot], stream));
  return d;
}

StreamOwner::~StreamOwner() {
  if (stream) cudaStreamDestroy(stream);
}

Context::~Context() {
  if (!stream) return;
  if (side_stream) cudaStreamSynchronize(side_stream);
  cudaStreamSynchronize(stream);
  scratch.release();
  side_scratch.release();
  if (lt_workspace) cudaFreeAsync(lt_workspace, stream);
  if (side_lt_workspace) cudaFreeAsync(side_lt_workspace, stream);
  cudaStreamSynchronize(stream);
  if (blas) cublasDestroy(blas);
  if (lt) cublasLtDestroy(lt);
  for (cudaEvent_t e : fences)
    if (e) cudaEventDestroy(e);
  if (alloc_stream) cudaStreamDestroy(alloc_stream);
  if (side_stream) cudaStreamDestroy(side_stream);
  if (fork_event) cudaEventDestroy(fork_event);
  if (join_event) cudaEventDestroy(join_event);
}

Tensor device_tensor(const std::shared_ptr<Context>& ctx, const Shape& shape, DType dtype) {
  for (int64_t d : shape) LINGBOT_CHECK(d >= 0, "negative tensor dimension " + shape_str(shape));
  const size_t bytes = static_cast<size_t>(shape_numel(shape)) * dtype_size(dtype);
  void* p = nullptr;
  try {
    p = device_malloc(*ctx, bytes ? bytes : 256);
  } catch (const Error& e) {
    throw Error(std::string(e.what()) + " for " + shape_str(shape) + " " + dtype_name(dtype));
  }
  std::shared_ptr<void> owner(p, [ctx](void* q) { device_free(*ctx, q); });
  return Tensor::wrap(p, shape, dtype, std::move(owner), Device::CUDA);
}

}  // namespace lingbot::cuda
