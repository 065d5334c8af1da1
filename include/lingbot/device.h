// Which devices this build can run on here: a CUDA backend compiled in is not enough, the machine
// also needs a driver and a GPU the kernels support. Callers choose a default device with it
// (the Python module's `has_cuda`), instead of failing at Engine::create.
#pragma once

namespace lingbot {

// Whether this build has the CUDA backend (independent of the machine).
bool built_with_cuda();

// GPUs an engine can be created on ("cuda:0" .. "cuda:N-1" where all are usable): 0 without the
// CUDA backend, without a driver, without a device, or where the devices are below sm_80. Asks
// the CUDA runtime each call (cheap; no context is created).
int usable_cuda_devices();

}  // namespace lingbot
