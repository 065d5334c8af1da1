// Without a CUDA build, asking for the GPU backend explains why there is none.
#include "backend/ops.h"
#include "lingbot/device.h"

#ifndef LINGBOT_HAVE_CUDA
namespace lingbot {
std::unique_ptr<Backend> make_cuda_backend(std::string* why) {
  return make_cuda_backend(0, why);
}
bool cuda_reads_fp8_kv(int) {
  return false;
}
bool cuda_peak_bf16_flops(int, double*, std::string*) {
  return false;
}
std::unique_ptr<Backend> make_cuda_backend(int, std::string* why, GpuPath) {
  if (why) *why = "this build has no CUDA backend (configure with nvcc available)";
  return nullptr;
}
bool built_with_cuda() {
  return false;
}
int usable_cuda_devices() {
  return 0;
}
}  // namespace lingbot
#endif
