// The MCAP export in a build without zstd (libzstd-dev): asking for it says so.
#include "io/sinks/sink.h"
#include "lingbot/error.h"

namespace lingbot {

std::unique_ptr<ResultSink> make_mcap_sink(const std::string&, McapOptions) {
  throw Error("the MCAP export needs zstd, which this build was made without (libzstd-dev)",
              ErrorKind::InvalidArgument);
}

}  // namespace lingbot
