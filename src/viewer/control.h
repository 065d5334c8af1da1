// The small JSON messages a browser sends the viewer. Kept apart from the server so that a fuzz
// target can exercise the parser alone.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace lingbot::viewer {

// Incoming WebSocket messages are at most this long (the server closes a connection that sends
// more); the browser only sends a few fields.
inline constexpr size_t kMaxControlBytes = 4096;

struct Control {
  enum class Op { Ping, Images } op = Op::Ping;
  int64_t id = 0;  // ping: echoed back in the pong
  bool on = true;  // images: whether this browser wants the current frame
};

// {"op": "ping", "id": N} or {"op": "images", "on": true|false}; throws Error (one line saying
// what is wrong) for anything else: not JSON, too long, an unknown op, a field of the wrong type.
Control parse_control(std::string_view text);

}  // namespace lingbot::viewer
