// Loop detection's features in a build without OpenCV: the library builds, the calls say why
// they cannot run.
#include "lingbot/error.h"
#include "loop/features.h"

namespace lingbot::loop {

namespace {
[[noreturn]] void unavailable() {
  throw Error(
      "loop detection is not built in: OpenCV (libopencv-dev) was not found when "
      "lingbot was configured");
}
}  // namespace

bool available() {
  return false;
}
Features extract(const Gray&, const LoopOptions&) {
  unavailable();
}
PairVerification verify(const Features&, const Features&, const LoopOptions&) {
  unavailable();
}
bool essential_pose(const std::array<double, 9>&, const std::array<float, 9>&,
                    const std::array<float, 9>&, const std::vector<std::array<float, 4>>&,
                    std::array<double, 9>&, std::array<double, 3>&) {
  unavailable();
}

}  // namespace lingbot::loop
