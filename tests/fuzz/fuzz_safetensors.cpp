// Any bytes: parse_safetensors returns valid views or throws lingbot::Error, nothing else.
#include <cstddef>
#include <cstdint>

#include "fuzz_util.h"
#include "lingbot/error.h"
#include "weights/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    lingbot::fuzz::touch(lingbot::parse_safetensors(data, size, nullptr, "fuzz").tensors);
  } catch (const lingbot::Error&) {
  }
  return 0;
}
