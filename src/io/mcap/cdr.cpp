#include "io/mcap/cdr.h"

#include <limits>

#include "lingbot/error.h"

namespace lingbot::mcap {

namespace {
uint32_t count32(size_t n, const char* what) {
  LINGBOT_CHECK(n < std::numeric_limits<uint32_t>::max(),
                std::string("CDR: a ") + what + " of " + std::to_string(n) +
                    " elements does not fit its 32-bit length");
  return static_cast<uint32_t>(n);
}
}  // namespace

void CdrWriter::string(std::string_view s) {
  u32(count32(s.size() + 1, "string"));
  buf_.append(s);
  buf_.push_back('\0');
}

void CdrWriter::sequence(size_t count) {
  u32(count32(count, "sequence"));
}

void CdrWriter::bytes(std::string_view data) {
  sequence(data.size());
  buf_.append(data);
}

size_t CdrWriter::reserve_bytes(size_t count) {
  sequence(count);
  const size_t at = buf_.size();
  buf_.resize(at + count);
  return at;
}

}  // namespace lingbot::mcap
