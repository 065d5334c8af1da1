// Any bytes as a checkpoint's data.pkl, storages standing in as zeros: the restricted unpickler
// and tensor rebuilding without the zip layer in the way.
#include <cstddef>
#include <cstdint>

#include "fuzz_util.h"
#include "lingbot/error.h"
#include "weights/torch_pt.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    lingbot::fuzz::touch(lingbot::parse_torch_pickle(data, size, "fuzz"));
  } catch (const lingbot::Error&) {
  }
  return 0;
}
