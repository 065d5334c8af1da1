#include "viewer/control.h"

#include <nlohmann/json.hpp>
#include <string>

#include "lingbot/error.h"

namespace lingbot::viewer {

Control parse_control(std::string_view text) {
  LINGBOT_CHECK_ARG(text.size() <= kMaxControlBytes,
                    "control message longer than " + std::to_string(kMaxControlBytes) + " bytes");
  // No exceptions from the parser itself, and depth is bounded by the length above.
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  LINGBOT_CHECK_ARG(!j.is_discarded(), "control message is not JSON");
  LINGBOT_CHECK_ARG(j.is_object(), "control message is not a JSON object");
  const auto op = j.find("op");
  LINGBOT_CHECK_ARG(op != j.end() && op->is_string(), "control message has no \"op\" string");
  Control c;
  if (*op == "ping") {
    c.op = Control::Op::Ping;
    const auto id = j.find("id");
    if (id != j.end()) {
      LINGBOT_CHECK_ARG(id->is_number_integer(), "ping: \"id\" must be an integer");
      c.id = id->get<int64_t>();
    }
  } else if (*op == "images") {
    c.op = Control::Op::Images;
    const auto on = j.find("on");
    LINGBOT_CHECK_ARG(on != j.end() && on->is_boolean(), "images: \"on\" must be true or false");
    c.on = on->get<bool>();
  } else {
    throw Error("unknown control op " + op->dump(), ErrorKind::InvalidArgument);
  }
  return c;
}

}  // namespace lingbot::viewer
