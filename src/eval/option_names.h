// The names of the evaluation's options (src/eval/option_names.cpp): the reports write them, the
// front ends' translations (lingbot/eval.h) read them.
#pragma once

#include "lingbot/eval.h"

namespace lingbot::eval {

const char* name(Alignment a);
const char* name(DeltaUnit u);
const char* name(DepthScaling s);

}  // namespace lingbot::eval
