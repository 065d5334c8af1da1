// The memory preflight in the words of the command line: sizes in GB, settings as the flags
// that change them ("try --window 52 or --size 280 (280x210 input)").
#pragma once

#include <cstddef>
#include <string>

#include "lingbot/preflight.h"

namespace lingbot::cli {

// "12.5 GB", or "57 MB" below 1 GB (decimal units, as the benchmark reports device memory).
std::string format_gb(size_t bytes);
// "weights 2.4 GB, KV cache 5.1 GB, camera cache 59 MB, activations 4.2 GB" and ", results
// 1.2 GB" when results were estimated.
std::string describe_terms(const MemoryEstimate& m);
// For --dry-run, each pool: "KV cache 7.2 GB (special stream 151 MB); activations 1.6 GB: first
// step 648 MB (freed after it), one-frame steps 84 MB, ...".
std::string describe_pools(const MemoryEstimate& m);
// "300 frames at 504x378 (BF16)".
std::string describe_run(const RunPlan& plan, const Preflight& p);
// What the caches hold at the peak: ", 72 frames cached", or per window for windowed runs.
std::string describe_cached(const RunPlan& plan, const Preflight& p);
// For --dry-run: a line when most of the estimate grows with the run and --max-special-frames
// would bound it, else "".
std::string growth_note(const Preflight& p);
// One line for a run that does not fit in `available` bytes: the numbers, and the flag values
// of the milder settings that would make it fit.
std::string explain_shortfall(const RunPlan& plan, const MemoryEstimate& need, size_t available);
// "time estimate: ~0.42 s a frame once the window is full, ~2.1 s for the scale block (on the
// CPU (2 threads, OpenBLAS)); ~11 s for 24 frames", or "" when the rate is unknown.
std::string describe_time(const RunPlan& plan, const Preflight& p);
// On a CPU with the released architecture: one line on what a smaller input or the tiny
// architecture would give; else "".
std::string cpu_size_hint(const RunPlan& plan, const Preflight& p);

}  // namespace lingbot::cli
