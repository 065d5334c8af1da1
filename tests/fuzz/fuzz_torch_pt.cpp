// Any bytes as a torch.save file (zip or legacy): tensors or lingbot::Error, nothing else.
#include <cstddef>
#include <cstdint>

#include "fuzz_util.h"
#include "lingbot/error.h"
#include "weights/torch_pt.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    lingbot::fuzz::touch(lingbot::parse_torch_checkpoint(data, size, nullptr, "fuzz"));
  } catch (const lingbot::Error&) {
  }
  return 0;
}
