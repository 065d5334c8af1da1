// Per-kernel device time of any CUDA process, without Nsight Systems: a CUPTI activity tracer
// that the CUDA driver loads into the process it starts.
//
//   CUDA_INJECTION64_PATH=build/bench/liblingbot_kernel_trace.so \
//   LINGBOT_TRACE_OUT=kernels.tsv build/lingbot-map bench --device cuda
//
// Kernels launched from recorded graphs are traced node by node, so a recorded step shows its
// real kernels. At exit the tracer writes one line per (kernel, grid, block): total device time,
// launches and the share of all kernel time, largest first, to LINGBOT_TRACE_OUT (stderr when
// unset), after a first line with the sum of kernel times, the time the device was busy (the
// union of the kernels' intervals) and the span from the first kernel to the last.
// LINGBOT_TRACE_SKIP_S drops kernels that start within that many seconds of the first traced kernel
// (the load and the warm-up), so the table describes the steady state. CONCURRENT_KERNEL activity
// keeps kernels concurrent, unlike the serializing KERNEL kind.
//
// LINGBOT_TRACE_TIMELINE=<file> also writes the last LINGBOT_TRACE_TIMELINE_RECORDS (default
// 20000) kernels, copies and fills, one per line in start order: start and end (ns), stream,
// kind (k, c, s) and name, to see where in a step the device waits.
#include <cupti.h>
#include <cxxabi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

namespace {

struct Key {
  std::string name;
  unsigned grid[3];
  unsigned block[3];
  bool operator<(const Key& o) const {
    return std::tie(name, grid[0], grid[1], grid[2], block[0], block[1], block[2]) <
           std::tie(o.name, o.grid[0], o.grid[1], o.grid[2], o.block[0], o.block[1], o.block[2]);
  }
};

struct Sum {
  unsigned long long ns = 0;
  unsigned long long launches = 0;
};

std::mutex g_mutex;
std::map<Key, Sum>* g_sums = nullptr;  // leaked on purpose: written until the very last flush
unsigned long long g_first_start = 0;
unsigned long long g_skip_ns = 0;
unsigned long long g_dropped = 0;
// Every traced kernel's [start, end): their union is the time the device computed anything,
// and the rest of the span is time it waited (launch gaps, host synchronization).
std::vector<std::pair<unsigned long long, unsigned long long>>* g_spans = nullptr;

struct Event {
  unsigned long long start, end;
  uint32_t stream;
  char kind;  // k kernel, c copy, s fill
  std::string name;
};
std::deque<Event>* g_timeline = nullptr;  // the last g_timeline_records, when asked for
size_t g_timeline_records = 0;

void keep(Event e) {
  if (g_timeline == nullptr) return;
  g_timeline->push_back(std::move(e));
  if (g_timeline->size() > g_timeline_records) g_timeline->pop_front();
}

constexpr size_t kBufferBytes = 8u << 20;

std::string demangle(const char* name) {
  if (name == nullptr) return "?";
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> out(abi::__cxa_demangle(name, nullptr, nullptr, &status),
                                             std::free);
  return status == 0 && out ? std::string(out.get()) : std::string(name);
}

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  // CUPTI wants 8-byte aligned buffers; aligned_alloc gives more.
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(64, kBufferBytes));
  *size = *buffer != nullptr ? kBufferBytes : 0;
  *max_records = 0;
}

void CUPTIAPI buffer_completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  CUpti_Activity* record = nullptr;
  std::lock_guard<std::mutex> lock(g_mutex);
  while (cuptiActivityGetNextRecord(buffer, valid, &record) == CUPTI_SUCCESS) {
    if (record->kind == CUPTI_ACTIVITY_KIND_MEMCPY) {
      const auto* c = reinterpret_cast<const CUpti_ActivityMemcpy6*>(record);
      keep({c->start, c->end, c->streamId, 'c',
            "copy kind " + std::to_string(c->copyKind) + " " + std::to_string(c->bytes) + " B"});
      continue;
    }
    if (record->kind == CUPTI_ACTIVITY_KIND_MEMSET) {
      const auto* m = reinterpret_cast<const CUpti_ActivityMemset4*>(record);
      keep({m->start, m->end, m->streamId, 's', "fill " + std::to_string(m->bytes) + " B"});
      continue;
    }
    if (record->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) continue;
    const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(record);
    if (g_timeline != nullptr) {
      // The qualified name without the return type, template arguments and parameters.
      std::string name = demangle(k->name);
      if (name.rfind("void ", 0) == 0) name.erase(0, 5);
      for (size_t at; (at = name.find("(anonymous namespace)")) != std::string::npos;)
        name.replace(at, 21, "anon");
      name.resize(std::min(name.find_first_of("<("), name.size()));
      keep({k->start, k->end, k->streamId, 'k', std::move(name)});
    }
    if (g_first_start == 0 || k->start < g_first_start) g_first_start = k->start;
    if (k->start < g_first_start + g_skip_ns) continue;
    Key key{demangle(k->name),
            {static_cast<unsigned>(k->gridX), static_cast<unsigned>(k->gridY),
             static_cast<unsigned>(k->gridZ)},
            {static_cast<unsigned>(k->blockX), static_cast<unsigned>(k->blockY),
             static_cast<unsigned>(k->blockZ)}};
    g_spans->emplace_back(k->start, k->end);
    Sum& s = (*g_sums)[key];
    s.ns += k->end - k->start;
    s.launches += 1;
  }
  size_t dropped = 0;
  if (cuptiActivityGetNumDroppedRecords(nullptr, 0, &dropped) == CUPTI_SUCCESS)
    g_dropped += dropped;
  std::free(buffer);
}

void report() {
  cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  std::lock_guard<std::mutex> lock(g_mutex);
  std::vector<std::pair<Key, Sum>> rows(g_sums->begin(), g_sums->end());
  std::sort(rows.begin(), rows.end(),
            [](const auto& a, const auto& b) { return a.second.ns > b.second.ns; });
  unsigned long long total = 0;
  for (const auto& r : rows) total += r.second.ns;
  std::sort(g_spans->begin(), g_spans->end());
  unsigned long long busy = 0, span = 0, open_start = 0, open_end = 0;
  for (const auto& [b, e] : *g_spans) {
    if (b > open_end) {
      busy += open_end - open_start;
      open_start = b;
      open_end = e;
    } else if (e > open_end) {
      open_end = e;
    }
  }
  busy += open_end - open_start;
  if (!g_spans->empty()) span = open_end - g_spans->front().first;
  const char* path = std::getenv("LINGBOT_TRACE_OUT");
  FILE* out = path != nullptr ? std::fopen(path, "w") : stderr;
  if (out == nullptr) out = stderr;
  std::fprintf(out, "# total_ms\t%.3f\tbusy_ms\t%.3f\tspan_ms\t%.3f\tdropped_records\t%llu\n",
               total / 1e6, busy / 1e6, span / 1e6, g_dropped);
  std::fprintf(out, "share\ttotal_ms\tlaunches\tavg_us\tgrid\tblock\tkernel\n");
  for (const auto& [key, sum] : rows) {
    std::fprintf(out, "%.4f\t%.3f\t%llu\t%.2f\t%ux%ux%u\t%ux%ux%u\t%s\n",
                 total ? double(sum.ns) / double(total) : 0.0, sum.ns / 1e6, sum.launches,
                 sum.ns / 1e3 / double(sum.launches), key.grid[0], key.grid[1], key.grid[2],
                 key.block[0], key.block[1], key.block[2], key.name.c_str());
  }
  if (out != stderr) std::fclose(out);
  if (g_timeline != nullptr) {
    std::sort(g_timeline->begin(), g_timeline->end(),
              [](const Event& a, const Event& b) { return a.start < b.start; });
    if (FILE* t = std::fopen(std::getenv("LINGBOT_TRACE_TIMELINE"), "w")) {
      for (const auto& e : *g_timeline)
        std::fprintf(t, "%llu\t%llu\t%u\t%c\t%s\n", e.start, e.end, e.stream, e.kind,
                     e.name.c_str());
      std::fclose(t);
    }
  }
}

}  // namespace

// Called by the CUDA driver when CUDA_INJECTION64_PATH names this library.
extern "C" __attribute__((visibility("default"))) int InitializeInjection() {
  g_sums = new std::map<Key, Sum>();
  g_spans = new std::vector<std::pair<unsigned long long, unsigned long long>>();
  if (const char* skip = std::getenv("LINGBOT_TRACE_SKIP_S"))
    g_skip_ns = static_cast<unsigned long long>(std::atof(skip) * 1e9);
  if (cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed) != CUPTI_SUCCESS ||
      cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) != CUPTI_SUCCESS) {
    std::fprintf(stderr, "kernel_trace: CUPTI refused the kernel activity; nothing traced\n");
    return 0;
  }
  if (std::getenv("LINGBOT_TRACE_TIMELINE") != nullptr) {
    g_timeline = new std::deque<Event>();
    const char* n = std::getenv("LINGBOT_TRACE_TIMELINE_RECORDS");
    g_timeline_records = n != nullptr ? std::strtoull(n, nullptr, 10) : 20000;
    if (cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMCPY) != CUPTI_SUCCESS ||
        cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMSET) != CUPTI_SUCCESS)
      std::fprintf(stderr, "kernel_trace: CUPTI refused copies and fills; kernels only\n");
  }
  std::atexit(report);
  return 1;
}
