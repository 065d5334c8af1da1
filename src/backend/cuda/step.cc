// A streaming step recorded as a CUDA graph (see StepRecorder in common.h). Launching ~1,500
// small kernels one by one leaves gaps on the device between them; a graph launch submits them
// together. The host still issues every op each step (shapes, page pointers and key counts
// change from frame to frame), but into the capture, and the executable graph is then updated
// in place, which costs far less than instantiating it again.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "backend/cuda/common.h"

namespace lingbot::cuda {

StepRecorder::~StepRecorder() {
  for (Arena& a : arenas_) {
    if (a.done) cudaEventSynchronize(a.done);
    if (a.exec) cudaGraphExecDestroy(a.exec);
    for (Block& b : a.blocks) {
      cudaFreeHost(b.host);
      cudaFree(b.dev);
    }
    if (a.done) cudaEventDestroy(a.done);
  }
  for (void* p : deferred_) cudaFree(p);
  if (copies_) {
    cudaStreamSynchronize(copies_);
    cudaStreamDestroy(copies_);
    cudaEventDestroy(staged_);
  }
}

void StepRecorder::begin(cudaStream_t stream, bool record) {
  LINGBOT_CHECK(!active_, "begin_step: a step is already open");
  arena_ = 1 - arena_;
  Arena& a = arenas_[arena_];
  // The arena's staged bytes belong to the step before last until it has run.
  if (a.done)
    LB_CUDA(cudaEventSynchronize(a.done));
  else
    LB_CUDA(cudaEventCreateWithFlags(&a.done, cudaEventDisableTiming));
  for (Block& b : a.blocks) b.used = 0;
  active_ = true;
  allocations_ = 0;
  if (record) {
    // Relaxed: allocations that a step makes now and then (a new chunk of the special-token
    // stream, say) wait for a side stream, which the stricter capture modes forbid.
    LB_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeRelaxed));
    capturing_ = true;
  }
}

void* StepRecorder::stage(const void* data, size_t bytes, cudaStream_t stream) {
  LINGBOT_CHECK(active_, "StepRecorder::stage outside a step");
  Arena& a = arenas_[arena_];
  const size_t need = (bytes + 255) / 256 * 256;
  auto fits = [&](const Block& b) { return b.cap - b.used >= need; };
  auto it = std::find_if(a.blocks.begin(), a.blocks.end(), fits);
  if (it == a.blocks.end()) {
    // A new block; blocks never move, as recorded copies and kernels point into them.
    Block b;
    b.cap =
        std::max<size_t>({need, size_t{4} << 20, a.blocks.empty() ? 0 : 2 * a.blocks.back().cap});
    LB_CUDA(cudaHostAlloc(reinterpret_cast<void**>(&b.host), b.cap, cudaHostAllocDefault));
    if (cudaMalloc(reinterpret_cast<void**>(&b.dev), b.cap) != cudaSuccess) {
      cudaGetLastError();
      cudaFreeHost(b.host);
      throw Error("out of GPU memory staging " + std::to_string(b.cap) + " bytes for a step");
    }
    a.blocks.push_back(b);
    it = a.blocks.end() - 1;
  }
  char* h = it->host + it->used;
  char* d = it->dev + it->used;
  it->used += need;
  std::memcpy(h, data, bytes);
  // A recorded step's bytes go up before its graph runs (end), all in one copy a block.
  if (!capturing_) LB_CUDA(cudaMemcpyAsync(d, h, bytes, cudaMemcpyHostToDevice, stream));
  return d;
}

void StepRecorder::upload_staged(const Arena& a, cudaStream_t stream) {
  // On a queue of their own the copies cross while the device still runs the step before (the
  // host records a step ahead); the arena's device blocks are free, as begin() waited for the
  // step before last, which read them.
  if (!copies_) {
    LB_CUDA(cudaStreamCreateWithFlags(&copies_, cudaStreamNonBlocking));
    LB_CUDA(cudaEventCreateWithFlags(&staged_, cudaEventDisableTiming));
  }
  bool any = false;
  for (const Block& b : a.blocks) {
    if (b.used == 0) continue;
    LB_CUDA(cudaMemcpyAsync(b.dev, b.host, b.used, cudaMemcpyHostToDevice, copies_));
    any = true;
  }
  if (!any) return;
  LB_CUDA(cudaEventRecord(staged_, copies_));
  LB_CUDA(cudaStreamWaitEvent(stream, staged_, 0));
}

void StepRecorder::note_allocation(size_t bytes) {
  ++allocations_;
  if (verbose_level() >= 1)
    std::fprintf(stderr, "[lingbot cuda] allocation while recording: %zu bytes\n", bytes);
}

void StepRecorder::flush_deferred(cudaStream_t stream) {
  for (void* p : deferred_) cudaFreeAsync(p, stream);
  deferred_.clear();
}

void StepRecorder::end(cudaStream_t stream) {
  LINGBOT_CHECK(active_, "end_step without begin_step");
  Arena& a = arenas_[arena_];
  if (capturing_) {
    const auto t0 = std::chrono::steady_clock::now();
    cudaGraph_t graph = nullptr;
    const cudaError_t e = cudaStreamEndCapture(stream, &graph);
    capturing_ = false;
    active_ = false;
    if (e != cudaSuccess) {
      cudaGetLastError();
      flush_deferred(stream);
      throw Error(std::string("recording a step as a CUDA graph failed: ") + cudaGetErrorString(e) +
                  " (LINGBOT_CUDA_GRAPH=0 runs without graphs)");
    }
    ++counters_.recorded;
    counters_.allocations += allocations_;
    if (a.exec) {
      cudaGraphExecUpdateResultInfo info{};
      if (cudaGraphExecUpdate(a.exec, graph, &info) == cudaSuccess) {
        ++counters_.updated;
      } else {
        cudaGetLastError();  // the kernel sequence changed: instantiate afresh
        cudaGraphExecDestroy(a.exec);
        a.exec = nullptr;
      }
    }
    const bool instantiated = !a.exec;
    if (instantiated) {
      const cudaError_t ie = cudaGraphInstantiate(&a.exec, graph, 0);
      if (ie != cudaSuccess) {
        cudaGetLastError();
        cudaGraphDestroy(graph);
        a.exec = nullptr;
        flush_deferred(stream);
        throw Error(std::string("instantiating a step's CUDA graph failed: ") +
                    cudaGetErrorString(ie));
      }
      ++counters_.instantiated;
    }
    cudaGraphDestroy(graph);
    upload_staged(a, stream);
    LB_CUDA(cudaGraphLaunch(a.exec, stream));
    // A line for each step that allocated or instantiated its graph (the slow kinds) and every
    // 50th, with its host time, to match against per-step times.
    if (verbose_level() >= 1 &&
        (allocations_ > 0 || instantiated || counters_.recorded % 50 == 0)) {
      const std::chrono::duration<double, std::milli> ms = std::chrono::steady_clock::now() - t0;
      std::fprintf(stderr,
                   "[lingbot cuda] step %lld: %s, %lld allocations while recording; %.2f ms "
                   "on the host from the end of the recording to the launch\n",
                   static_cast<long long>(counters_.recorded),
                   instantiated ? "graph instantiated" : "graph updated",
                   static_cast<long long>(allocations_), ms.count());
    }
  }
  active_ = false;
  flush_deferred(stream);
  LB_CUDA(cudaEventRecord(a.done, stream));
}

void StepRecorder::abort(cudaStream_t stream) {
  if (!active_) return;
  if (capturing_) {
    cudaGraph_t graph = nullptr;
    cudaStreamEndCapture(stream, &graph);  // the partial recording is dropped
    if (graph) cudaGraphDestroy(graph);
    cudaGetLastError();
    capturing_ = false;
  }
  active_ = false;
  flush_deferred(stream);
  if (arenas_[arena_].done) cudaEventRecord(arenas_[arena_].done, stream);
}

}  // namespace lingbot::cuda
