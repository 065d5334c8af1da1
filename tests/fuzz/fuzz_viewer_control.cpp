// Any bytes as a WebSocket message from a browser to the viewer: the control-message parser
// either returns a message or throws Error, whatever it is sent.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "lingbot/error.h"
#include "viewer/control.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const lingbot::viewer::Control c =
        lingbot::viewer::parse_control({reinterpret_cast<const char*>(data), size});
    volatile int64_t sink = c.id + c.on + static_cast<int>(c.op);
    (void)sink;
  } catch (const lingbot::Error&) {
  }
  return 0;
}
