// One exception type for everything a user can cause: a sentence saying what, where, what to do.
#pragma once

#include <stdexcept>
#include <string>

namespace lingbot {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

// Checks an invariant that bad input can break; throws Error with the message.
#define LINGBOT_CHECK(cond, msg)                           \
  do {                                                     \
    if (!(cond)) throw ::lingbot::Error(std::string(msg)); \
  } while (0)

}  // namespace lingbot
