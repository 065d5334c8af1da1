// Any bytes as a message from a stream server's client: as text, the start/finish parser; as a
// frame, the header parser. Each either returns or throws Error, whatever it is sent.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "lingbot/error.h"
#include "serve/protocol.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const lingbot::serve::ClientText c =
        lingbot::serve::parse_client_text({reinterpret_cast<const char*>(data), size}, {});
    volatile int64_t sink = c.start.model_width + c.start.model_height + c.start.frames;
    (void)sink;
  } catch (const lingbot::Error&) {
  }
  try {
    const lingbot::serve::FrameHeader h = lingbot::serve::parse_frame_header(data, size);
    volatile int sink = h.width + h.height;
    (void)sink;
  } catch (const lingbot::Error&) {
  }
  return 0;
}
