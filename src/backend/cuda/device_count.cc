// The devices an engine can run on, for callers choosing a default (lingbot/device.h).
#include <cuda_runtime.h>

#include "lingbot/device.h"

namespace lingbot {

bool built_with_cuda() {
  return true;
}

int usable_cuda_devices() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // no driver or no device: clear the sticky error for later calls
    return 0;
  }
  // make_cuda_backend refuses devices below sm_80 (the bf16 tensor-core kernels need it).
  int usable = 0;
  for (int d = 0; d < count; ++d) {
    int major = 0;
    if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, d) == cudaSuccess &&
        major >= 8)
      ++usable;
    else
      cudaGetLastError();
  }
  return usable;
}

}  // namespace lingbot
