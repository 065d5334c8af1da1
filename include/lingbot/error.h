// One exception type for everything a user can cause: a sentence saying what, where, what to do.
#pragma once

#include <stdexcept>
#include <string>

namespace lingbot {

// What kind of mistake an Error reports, for callers that map errors onto their own (the Python
// module raises FileNotFoundError, ValueError or RuntimeError by it).
enum class ErrorKind {
  Failure,          // anything else: a damaged file, a device failure, a write that failed
  InvalidArgument,  // an option out of range, a frame of the wrong shape or size
  NotFound,         // a file or folder that does not exist
};

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what, ErrorKind kind = ErrorKind::Failure)
      : std::runtime_error(what), kind_(kind) {}
  ErrorKind kind() const { return kind_; }

 private:
  ErrorKind kind_;
};

// Checks an invariant that bad input can break; throws Error with the message.
#define LINGBOT_CHECK(cond, msg)                           \
  do {                                                     \
    if (!(cond)) throw ::lingbot::Error(std::string(msg)); \
  } while (0)

// The same for a caller's argument (an option, a shape): an ErrorKind::InvalidArgument.
#define LINGBOT_CHECK_ARG(cond, msg)                                                              \
  do {                                                                                            \
    if (!(cond)) throw ::lingbot::Error(std::string(msg), ::lingbot::ErrorKind::InvalidArgument); \
  } while (0)

}  // namespace lingbot
