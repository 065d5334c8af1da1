// The export sinks: declared in the public lingbot/exports.h, one .cpp each in this folder.
#pragma once

#include "lingbot/exports.h"
