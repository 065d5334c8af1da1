// What the metrics share: medians as numpy takes them.
#pragma once

#include <vector>

namespace lingbot::eval {

// numpy.median: the middle value, or the mean of the two middle ones. `v` is reordered.
double median_of(std::vector<double>& v);

}  // namespace lingbot::eval
