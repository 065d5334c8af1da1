#include "preflight_text.h"

#include <algorithm>
#include <cstdio>

namespace lingbot::cli {

std::string format_gb(size_t bytes) {
  char buf[32];
  if (bytes >= 1000000000)
    std::snprintf(buf, sizeof buf, "%.1f GB", static_cast<double>(bytes) / 1e9);
  else
    std::snprintf(buf, sizeof buf, "%.0f MB", static_cast<double>(bytes) / 1e6);
  return buf;
}

std::string describe_terms(const MemoryEstimate& m) {
  std::string s = "weights " + format_gb(m.weights) + ", KV cache " + format_gb(m.kv_cache) +
                  ", camera cache " + format_gb(m.camera_cache) + ", activations " +
                  format_gb(m.activations);
  if (m.results) s += ", results " + format_gb(m.results);
  return s;
}

std::string describe_pools(const MemoryEstimate& m) {
  const MemoryEstimate::ActivationParts& a = m.activation_parts;
  return "KV cache " + format_gb(m.kv_cache) + " (special stream " + format_gb(m.special_stream) +
         "); activations " + format_gb(m.activations) + ": first step " + format_gb(a.first_step) +
         " (freed after it), one-frame steps " + format_gb(a.one_frame_steps) +
         ", depth-head plan " + format_gb(a.depth_plan) + ", scratch and GEMM workspace " +
         format_gb(a.scratch) + ", pool margin " + format_gb(a.margin);
}

std::string describe_run(const RunPlan& plan, const Preflight& p) {
  return std::to_string(plan.frames) + " frames at " + std::to_string(plan.width) + "x" +
         std::to_string(plan.height) + " (" + dtype_name(p.compute) +
         (p.kv_cache != p.compute ? std::string(", KV cache ") + dtype_name(p.kv_cache) : "") + ")";
}

std::string describe_cached(const RunPlan& plan, const Preflight& p) {
  const std::string cached = std::to_string(p.cached_frames) + " frames cached";
  if (!plan.windowed) return ", " + cached;
  if (p.windows == 0) return ", windowed with adaptive keyframes: up to " + cached + " per window";
  return ", windowed: " + std::to_string(p.windows) + " windows of up to " +
         std::to_string(p.window_frames) + " frames, " + cached + " per window";
}

std::string growth_note(const Preflight& p) {
  if (!p.unbounded_growth) return "";
  return "note: " + format_gb(p.unbounded_growth) + " of the ~" + format_gb(p.need.total) +
         " is the special-token stream and camera caches, which grow with the number of "
         "frames; --max-special-frames N bounds them (see \"Long sequences\" in "
         "docs/ARCHITECTURE.md)";
}

std::string explain_shortfall(const RunPlan& plan, const MemoryEstimate& need, size_t available) {
  const MilderSettings m = milder_settings(plan, available);
  std::string tries;
  auto suggest = [&](const char* flag, const std::optional<int>& v) {
    if (v) tries += (tries.empty() ? "" : " or ") + std::string(flag) + " " + std::to_string(*v);
  };
  auto suggest_size = [&] {
    if (!m.input_width) return;
    const std::string w = std::to_string(*m.input_width);
    suggest("--size", m.input_width);
    tries += " (" + w + "x" + std::to_string(*m.input_height) + " input)";
  };
  if (plan.windowed) {
    suggest("--window-size", m.window_size);
    suggest("--window", m.window);
    suggest_size();
  } else {
    suggest("--window", m.window);
    suggest("--keyframe-interval", m.keyframe_interval);
    suggest("--scale-frames", m.scale_frames);
    suggest_size();
  }
  suggest("--max-special-frames", m.max_special_frames);
  if (tries.empty())
    tries = "no single setting fits; combine them or use a larger device";
  else
    tries = "try " + tries;
  return "needs ~" + format_gb(need.total) + " (" + describe_terms(need) + "), " +
         format_gb(available) + " available: " + tries;
}

namespace {
// "0.42 s", "35 ms", "2 min 10 s".
std::string format_seconds(double s) {
  char b[48];
  if (s < 1)
    std::snprintf(b, sizeof b, "%.0f ms", s * 1e3);
  else if (s < 100)
    std::snprintf(b, sizeof b, "%.2g s", s);
  else if (s < 3600)
    std::snprintf(b, sizeof b, "%d min %02d s", int(s) / 60, int(s) % 60);
  else
    std::snprintf(b, sizeof b, "%.1f h", s / 3600);
  return b;
}
}  // namespace

std::string describe_time(const RunPlan& plan, const Preflight& p) {
  const TimeEstimate& t = p.time;
  if (!(t.rate > 0)) return "";
  std::string s = "time estimate: ~" + format_seconds(t.frame_seconds()) +
                  " a frame once the window is full, ~" + format_seconds(t.scale_block_seconds()) +
                  " for the scale block (on " + t.device + ")";
  if (plan.frames > 0 && !plan.windowed) {
    const double scale = std::min<double>(plan.frames, std::max(plan.stream.scale_frames, 1));
    s += "; ~" +
         format_seconds(t.scale_block_seconds() + (plan.frames - scale) * t.frame_seconds()) +
         " for " + std::to_string(plan.frames) + " frames at most";
  }
  return s;
}

std::string cpu_size_hint(const RunPlan& plan, const Preflight& p) {
  if (is_cuda_device(plan.engine.device) || p.time.frame_seconds() < 2) return "";
  // Only what would change this run: no smaller size than it has, no --arch it already uses.
  std::string ways;
  auto add = [&](const std::string& way) { ways += (ways.empty() ? "" : " or ") + way; };
  constexpr int kSmall = 280;
  if (plan.width > kSmall)
    add("a smaller input (--size " + std::to_string(kSmall) + ": ~" +
        std::to_string(int(100.0 * kSmall * kSmall / (double(plan.width) * plan.width) + 0.5)) +
        " % of the pixels)");
  if (plan.engine.model.rfind("synthetic:", 0) == 0 && plan.engine.arch != "tiny")
    add("--arch tiny (the small test architecture, for synthetic weights)");
  add("a GPU (--device cuda)");
  return "this run is slow on a CPU: " + ways + " is faster";
}

}  // namespace lingbot::cli
