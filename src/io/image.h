// Image files in and out: the declarations are public (lingbot/image.h).
#pragma once

#include "lingbot/image.h"
