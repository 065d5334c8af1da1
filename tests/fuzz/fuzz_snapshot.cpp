// Any bytes: parse_snapshot returns a state whose tensors fit what it describes, or throws
// lingbot::Error, nothing else.
#include <cstddef>
#include <cstdint>

#include "fuzz_util.h"
#include "lingbot/error.h"
#include "stream/snapshot_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    lingbot::fuzz::touch(lingbot::parse_snapshot(data, size, nullptr, "fuzz").tensors);
  } catch (const lingbot::Error&) {
  }
  return 0;
}
