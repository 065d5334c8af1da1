// `lingbot-map bench`: streaming speed with synthetic weights and random frames, with the
// reference profiler's settings as defaults (378x504, 300 frames, window 64, scale 8,
// camera iterations 4, keyframe interval 1).
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>

#include "commands.h"
#include "lingbot/error.h"
#include "lingbot/preflight.h"
#include "lingbot/profile.h"
#include "pipeline.h"
#include "preflight_text.h"

namespace lingbot::cli {
namespace {

struct BenchArgs {
  EngineOptions engine{.model = "synthetic:3", .arch = "lingbot-map"};
  StreamOptions stream;
  int frames = 300, height = 378, width = 504;
  int warmup = 10;  // streamed frames of an untimed first sequence, as the reference profiler does
  int profile_every = 0;  // with LINGBOT_PROFILE=1: one stage breakdown per this many frames
  int streams = 1;        // sessions streaming at once, each from its own thread
  // --rate: each stream is a live camera at this many frames/s (0: pushed as fast as it goes);
  // --stagger spreads the cameras' capture times over one frame period instead of aligning them.
  double rate = 0;
  bool stagger = false;
  std::string json;
};

using Clock = std::chrono::steady_clock;

// A few random frames made before anything is timed: made inside the loop (5 ms a frame on one
// core) they would overlap the device's work and hide that much of each frame's time.
std::vector<Tensor> random_frames(const BenchArgs& a, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(0.f, 1.f);
  std::vector<Tensor> frames;
  for (int k = 0; k < 4; ++k) {
    frames.push_back(Tensor::zeros({3, a.height, a.width}));
    for (int64_t j = 0; j < frames.back().numel(); ++j) frames.back().f32()[j] = u(rng);
  }
  return frames;
}

// The fields both JSON reports start with: what ran, at which settings.
nlohmann::ordered_json report_header(const BenchArgs& a, const ModelInfo& info) {
  return {{"arch", info.arch},
          {"backend", info.backend},
          {"precision", a.engine.precision},
          {"gpu_path", a.engine.gpu_path},
          {"compute", info.compute},
          {"kv_cache", info.kv_cache},
          {"height", a.height},
          {"width", a.width},
          {"frames", a.frames},
          {"scale_frames", a.stream.scale_frames},
          {"window", a.stream.window},
          {"keyframe_interval", a.stream.keyframe_interval},
          {"camera_iterations", a.stream.camera_iterations}};
}

double quantile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(q * v.size()))];
}

// --streams N: N sessions of one engine, each pushed from its own thread, so that the engine
// batches their steps. Throughput counts the results delivered while every stream was in phase
// 2 (from the last stream's end of phase 1 to the first stream's last result); a frame's latency
// runs from the start of its push to its result's delivery. With --rate each stream is a live
// camera: frame i is captured at start + (i + phase) / rate (phase 0, or s / N with --stagger),
// pushed then (or at once if the stream is behind), and flushed, so its result comes as soon as
// the device has it; its latency runs from its capture time, a backlog included.
int bench_streams(const BenchArgs& a, Engine& engine, double load_s) {
  const int n = a.streams;
  struct Stream {
    std::unique_ptr<Session> session;
    std::vector<Tensor> frames;
    std::vector<Clock::time_point> pushed, delivered;  // per frame
    Clock::time_point phase2_start, end;
    int64_t results = 0;  // of the timed sequence
    std::exception_ptr error;
  };
  std::vector<Stream> streams(n);
  for (int s = 0; s < n; ++s) {
    streams[s].session = engine.start(a.stream);
    streams[s].frames = random_frames(a, static_cast<unsigned>(s));
    streams[s].pushed.resize(a.frames);
    streams[s].delivered.resize(a.frames);
  }
  size_t peak_device = 0;
  std::mutex peak_mu;
  Clock::time_point t0;  // the cameras' common clock (--rate), set before the timed sequence
  auto stream_once = [&](Stream& st, bool timed) {
    const int count = timed ? a.frames : a.stream.scale_frames + a.warmup;
    const double phase = a.stagger ? static_cast<double>(&st - streams.data()) / n : 0.0;
    const auto on_result = [&](const FrameResult& r) {
      if (timed && r.index < a.frames) st.delivered[r.index] = Clock::now();
      st.results += timed;
    };
    for (int i = 0; i < count; ++i) {
      if (timed && a.rate > 0) {
        const auto capture = t0 + std::chrono::duration_cast<Clock::duration>(
                                      std::chrono::duration<double>((i + phase) / a.rate));
        std::this_thread::sleep_until(capture);
        st.pushed[i] = capture;
      } else if (timed) {
        st.pushed[i] = Clock::now();
      }
      st.session->push(st.frames[i % st.frames.size()], on_result);
      if (timed && a.rate > 0) st.session->flush(on_result);
      if (timed && i + 1 == a.stream.scale_frames) st.phase2_start = Clock::now();
      if (timed && i % 16 == 0) {
        const size_t used = engine.device_memory_used();
        std::lock_guard lock(peak_mu);
        peak_device = std::max(peak_device, used);
      }
    }
    st.session->finish(on_result);
    if (timed) st.end = Clock::now();
    if (!timed) st.session->reset();
  };
  // The warm-ups run together too: the batched steps' GEMM plans are made there.
  for (bool timed : {false, true}) {
    if (!timed && a.warmup == 0) continue;
    t0 = Clock::now() + std::chrono::milliseconds(10);  // all threads started by then
    std::vector<std::thread> threads;
    for (auto& st : streams)
      threads.emplace_back([&, timed] {
        try {
          stream_once(st, timed);
        } catch (...) {
          st.error = std::current_exception();
        }
      });
    for (auto& t : threads) t.join();
    for (auto& st : streams)
      if (st.error) std::rethrow_exception(st.error);
  }
  for (int s = 0; s < n; ++s)
    LINGBOT_CHECK(streams[s].results == a.frames, "stream " + std::to_string(s) + " delivered " +
                                                      std::to_string(streams[s].results) + " of " +
                                                      std::to_string(a.frames) + " results");
  Clock::time_point from = streams[0].phase2_start, to = streams[0].end;
  Clock::time_point first = from, last = to;
  for (auto& st : streams) {
    from = std::max(from, st.phase2_start);
    to = std::min(to, st.end);
    first = std::min(first, st.phase2_start);
    last = std::max(last, st.end);
  }
  // Every stream's phase 1 runs at its start (each a step of scale_frames frames) and delays
  // the others' first frames; "steady" latencies are those of frames pushed once the last
  // phase-1 result is out.
  Clock::time_point steady_from = first;
  for (auto& st : streams)
    steady_from = std::max(steady_from, st.delivered[a.stream.scale_frames - 1]);
  // Live cameras (--rate) start with a backlog: the phase-1 steps' delay drains only at the
  // spare rate of the device (the offered rate's distance from the device's). A stream has caught
  // up once one of its phase-2 results arrives before its next frame is captured; the "caught
  // up" latencies are those of frames pushed once every stream has.
  Clock::time_point caught_up = steady_from;
  bool all_caught_up = a.rate > 0;
  const auto period = std::chrono::duration_cast<Clock::duration>(
      std::chrono::duration<double>(1.0 / std::max(a.rate, 1e-9)));
  for (auto& st : streams) {
    int i = a.stream.scale_frames;
    while (i + 1 < a.frames && st.delivered[i] > st.pushed[i] + period) ++i;
    if (i + 1 >= a.frames) all_caught_up = false;
    caught_up = std::max(caught_up, st.delivered[i]);
  }
  int64_t in_window = 0;
  std::vector<double> all_ms, steady_ms, caught_up_ms;
  nlohmann::ordered_json per_stream = nlohmann::ordered_json::array();
  for (auto& st : streams) {
    std::vector<double> ms;
    for (int i = a.stream.scale_frames; i < a.frames; ++i) {
      ms.push_back(
          std::chrono::duration<double, std::milli>(st.delivered[i] - st.pushed[i]).count());
      if (st.pushed[i] >= steady_from) steady_ms.push_back(ms.back());
      if (all_caught_up && st.pushed[i] >= caught_up) caught_up_ms.push_back(ms.back());
      in_window += st.delivered[i] >= from && st.delivered[i] <= to;
    }
    const double fps = ms.size() / std::chrono::duration<double>(st.end - st.phase2_start).count();
    per_stream.push_back({{"fps", fps},
                          {"latency_ms_p50", quantile(ms, 0.5)},
                          {"latency_ms_p99", quantile(ms, 0.99)}});
    all_ms.insert(all_ms.end(), ms.begin(), ms.end());
  }
  // Runs too short for the streams to overlap in phase 2 fall back to all phase-2 frames over
  // the span from the first stream's phase 2 to the last result.
  const double window_s = std::chrono::duration<double>(to - from).count();
  const double aggregate =
      window_s > 0 && in_window >= n
          ? in_window / window_s
          : all_ms.size() / std::chrono::duration<double>(last - first).count();
  // What the preflight expects the streams to hold together: the weights once, the rest per
  // stream (memory only: bench() gave the time estimate before the engine loaded).
  const Preflight p = preflight({.engine = a.engine,
                                 .height = a.height,
                                 .width = a.width,
                                 .frames = a.frames,
                                 .stream = a.stream,
                                 .results = {.predictions = false, .on_host = false}},
                                /*with_time=*/false);
  const size_t estimate = p.need.weights + n * (p.need.total - p.need.weights);
  const ModelInfo info = engine.info();
  std::printf("model %s on %s, %dx%d, %d streams x %d frames, scale %d, window %d\n",
              info.arch.c_str(), info.backend.c_str(), a.width, a.height, n, a.frames,
              a.stream.scale_frames, a.stream.window);
  if (a.rate > 0)
    std::printf("live cameras: %.2f frames/s each (%.2f offered), capture times %s\n", a.rate,
                a.rate * n, a.stagger ? "staggered over a frame period" : "aligned");
  std::printf(
      "aggregate %.2f frames/s (%.2f per stream) | latency p50 %.1f ms, p99 %.1f ms | load %.2f "
      "s\n",
      aggregate, aggregate / n, quantile(all_ms, 0.5), quantile(all_ms, 0.99), load_s);
  if (!steady_ms.empty())
    std::printf(
        "latency once every stream's phase 1 is done (%zu frames): p50 %.1f ms, p99 %.1f ms\n",
        steady_ms.size(), quantile(steady_ms, 0.5), quantile(steady_ms, 0.99));
  if (!caught_up_ms.empty())
    std::printf(
        "latency once every stream has caught up (%zu frames, from %.1f s): p50 %.1f ms, p99 %.1f "
        "ms\n",
        caught_up_ms.size(), std::chrono::duration<double>(caught_up - t0).count(),
        quantile(caught_up_ms, 0.5), quantile(caught_up_ms, 0.99));
  else if (a.rate > 0)
    std::printf("some stream never caught up with its camera\n");
  for (int s = 0; s < n; ++s)
    std::printf("  stream %d: %.2f frames/s, latency p50 %.1f ms, p99 %.1f ms\n", s,
                per_stream[s]["fps"].get<double>(), per_stream[s]["latency_ms_p50"].get<double>(),
                per_stream[s]["latency_ms_p99"].get<double>());
  std::printf("peak device memory %.2f GB | preflight estimate %.2f GB\n", peak_device / 1e9,
              estimate / 1e9);
  if (!a.json.empty()) {
    nlohmann::ordered_json j = report_header(a, info);
    j["streams"] = n;
    j["rate"] = a.rate;
    j["stagger"] = a.stagger;
    j["aggregate_fps"] = aggregate;
    j["latency_ms_p50"] = quantile(all_ms, 0.5);
    j["latency_ms_p99"] = quantile(all_ms, 0.99);
    j["steady_frames"] = steady_ms.size();
    j["steady_latency_ms_p50"] = quantile(steady_ms, 0.5);
    j["steady_latency_ms_p99"] = quantile(steady_ms, 0.99);
    if (a.rate > 0) {
      j["caught_up_frames"] = caught_up_ms.size();
      j["caught_up_after_s"] =
          all_caught_up ? std::chrono::duration<double>(caught_up - t0).count() : -1.0;
      j["caught_up_latency_ms_p50"] = quantile(caught_up_ms, 0.5);
      j["caught_up_latency_ms_p99"] = quantile(caught_up_ms, 0.99);
    }
    j["per_stream"] = per_stream;
    j["peak_device_gb"] = peak_device / 1e9;
    j["preflight_gb"] = estimate / 1e9;
    std::ofstream(a.json) << j.dump(1) << "\n";
  }
  return 0;
}

int bench(const BenchArgs& a) {
  LINGBOT_CHECK(a.height % 14 == 0 && a.width % 14 == 0,
                "--height and --width must be multiples of 14");
  LINGBOT_CHECK(a.frames >= a.stream.scale_frames, "--frames must be at least --scale-frames");
  using clock = Clock;
  {  // A CPU bench of the released model takes minutes: say how long before it starts.
    const RunPlan plan{.engine = a.engine,
                       .height = a.height,
                       .width = a.width,
                       .frames = int64_t{a.frames} * a.streams,
                       .stream = a.stream};
    const Preflight p = preflight(plan);
    const double total = p.time.scale_block_seconds() * 2 * a.streams +
                         p.time.frame_seconds() * (a.frames + a.warmup) * a.streams;
    if (p.time.rate > 0)
      std::fprintf(stderr,
                   "bench: %s x %d streams, warm-up then %d frames each; estimated ~%.0f s "
                   "(%.2f s a frame) on %s\n",
                   a.engine.arch.c_str(), a.streams, a.frames, total, p.time.frame_seconds(),
                   p.time.device.c_str());
    if (const std::string h = cpu_size_hint(plan, p); !h.empty())
      std::fprintf(stderr, "%s\n", h.c_str());
  }
  const auto t_load = clock::now();
  auto engine = Engine::create(a.engine);
  const double load_s = std::chrono::duration<double>(clock::now() - t_load).count();
  LINGBOT_CHECK(!a.stagger || a.rate > 0, "--stagger staggers live cameras: it needs --rate");
  if (a.streams > 1 || a.rate > 0) return bench_streams(a, *engine, load_s);
  const size_t loaded_device = engine->device_memory_used();  // context, libraries, weights
  auto session = engine->start(a.stream);
  const std::vector<Tensor> frames = random_frames(a, 0);
  std::vector<double> frame_ms;  // phase-2 frames, in order
  double phase1_ms = 0;
  size_t peak_device = 0, phase1_device = 0;
  int delivered = 0;
  // Stage breakdowns per stretch of frames (LINGBOT_PROFILE=1 or host, and --profile-every), to
  // see which stage grows along a long run.
  const bool profiling = Profile::enabled() || Profile::host_enabled();
  const char* what = Profile::enabled() ? "synchronized stages" : "host phases";
  nlohmann::ordered_json stretches = nlohmann::ordered_json::array();
  auto close_stretch = [&](int first, int last) {
    nlohmann::ordered_json st;
    for (auto& [stage, ms] : engine->profile_ms()) st[stage] = ms / (last - first);
    stretches.push_back({{"first", first}, {"last", last}, {"ms_per_frame", st}});
    engine->reset_profile();
  };
  auto on_result = [&](const FrameResult&) { ++delivered; };
  // Warm-up: one untimed sequence (scale frames + `warmup` streamed frames), then a reset, so
  // one-time setup (GEMM plans, allocations) is not billed to the first timed frames.
  if (a.warmup > 0) {
    for (int i = 0; i < a.stream.scale_frames + a.warmup; ++i)
      session->push(frames[i % frames.size()], [](const FrameResult&) {});
    session->reset();
  }
  const auto t0 = clock::now();
  auto streaming_start = t0;  // the end of phase 1
  for (int i = 0; i < a.frames; ++i) {
    const auto before = clock::now();
    session->push(frames[i % frames.size()], on_result);  // the scale_frames-th runs phase 1
    const double ms = std::chrono::duration<double, std::milli>(clock::now() - before).count();
    peak_device = std::max(peak_device, engine->device_memory_used());
    if (i + 1 == a.stream.scale_frames) {
      phase1_ms = ms;
      phase1_device = engine->device_memory_used();
      streaming_start = clock::now();
      engine->reset_profile();  // the breakdown covers phase-2 frames
    }
    if (i >= a.stream.scale_frames) frame_ms.push_back(ms);
    const int streamed = i + 1 - a.stream.scale_frames;
    if (profiling && a.profile_every > 0 && streamed > 0 && streamed % a.profile_every == 0)
      close_stretch(streamed - a.profile_every, streamed);
  }
  {
    // The last frame's results come out of finish(): its wait belongs to that frame.
    const auto before = clock::now();
    session->finish(on_result);
    const double ms = std::chrono::duration<double, std::milli>(clock::now() - before).count();
    if (!frame_ms.empty()) frame_ms.back() += ms;
  }
  const double total_s = std::chrono::duration<double>(clock::now() - t0).count();
  auto at = [&](double q) {
    return frame_ms.empty()
               ? 0.0
               : frame_ms[std::min(frame_ms.size() - 1, static_cast<size_t>(q * frame_ms.size()))];
  };
  // Streaming rate: phase-2 frames over the wall time from the end of phase 1 to the last
  // result, everything the loop does included.
  const double streaming_s = std::chrono::duration<double>(clock::now() - streaming_start).count();
  const double fps = frame_ms.empty() ? 0 : frame_ms.size() / streaming_s;
  struct rusage ru {};
  getrusage(RUSAGE_SELF, &ru);
  const ModelInfo info = engine->info();
  std::printf(
      "model %s (%zu parameters) on %s, %s (KV cache %s), %dx%d, %d frames, scale %d, window "
      "%d, keyframe interval %d\n",
      info.arch.c_str(), info.parameters, info.backend.c_str(), info.compute.c_str(),
      info.kv_cache.c_str(), a.width, a.height, a.frames, a.stream.scale_frames, a.stream.window,
      a.stream.keyframe_interval);
  std::printf(
      "load %.2f s | phase 1 (%d frames) %.1f ms | per frame at 10/50/90%%: %.1f / %.1f / %.1f "
      "ms\n",
      load_s, a.stream.scale_frames, phase1_ms, at(0.1), at(0.5), at(0.9));
  std::printf(
      "streaming %.2f frames/s | whole run %.1f s | peak host memory %.2f GB | peak device memory "
      "%.2f GB\n",
      fps, total_s, ru.ru_maxrss / 1048576.0, peak_device / 1e9);
  if (loaded_device)
    std::printf("device memory in use: after load %.2f GB, after phase 1 %.2f GB\n",
                loaded_device / 1e9, phase1_device / 1e9);
  if (!stretches.empty()) {
    for (const auto* st : {&stretches.front(), &stretches.back()}) {
      std::printf("frames %d-%d, %s:\n", (*st)["first"].get<int>(), (*st)["last"].get<int>(), what);
      for (auto& [stage, ms] : (*st)["ms_per_frame"].items())
        std::printf("  %-28s %8.2f ms\n", stage.c_str(), ms.get<double>());
    }
  } else if (profiling && !frame_ms.empty()) {
    std::printf("per phase-2 frame, %s:\n", what);
    for (auto& [stage, ms] : engine->profile_ms())
      std::printf("  %-28s %8.2f ms\n", stage.c_str(), ms / frame_ms.size());
  }
  if (!a.json.empty()) {
    nlohmann::ordered_json j = report_header(a, info);
    j["load_s"] = load_s;
    j["phase1_ms"] = phase1_ms;
    j["frame_ms_p10"] = at(0.1);
    j["frame_ms_p50"] = at(0.5);
    j["frame_ms_p90"] = at(0.9);
    j["fps"] = fps;
    j["frame_ms"] = frame_ms;
    j["peak_host_gb"] = ru.ru_maxrss / 1048576.0;
    j["peak_device_gb"] = peak_device / 1e9;
    j["loaded_device_gb"] = loaded_device / 1e9;
    j["phase1_device_gb"] = phase1_device / 1e9;
    if (!stretches.empty()) j["profile"] = stretches;
    std::ofstream(a.json) << j.dump(1) << "\n";
  }
  return delivered == a.frames ? 0 : 1;
}

}  // namespace

void add_bench(CLI::App& app) {
  auto a = std::make_shared<BenchArgs>();
  CLI::App* sub =
      app.add_subcommand("bench", "Measure streaming speed (synthetic weights, random frames)");
  sub->add_option("--model", a->engine.model, "weights")->capture_default_str();
  sub->add_option("--arch", a->engine.arch, "architecture")->capture_default_str();
  sub->add_option("--device", a->engine.device, "cpu, cuda or cuda:N")->capture_default_str();
  sub->add_option("--threads", a->engine.threads, "CPU threads (0 = all cores)")
      ->check(kNonNegative);
  sub->add_option("--precision", a->engine.precision,
                  "auto, f32, bf16 or fp8 (the KV cache in e4m3; auto picks it on the GPU)")
      ->capture_default_str();
  sub->add_option("--gpu-path", a->engine.gpu_path,
                  "auto, hopper or portable (the kernels of sm_80/86/89 GPUs, on any GPU)")
      ->capture_default_str()
      ->check(CLI::IsMember({"auto", "hopper", "portable"}));
  sub->add_option("--frames", a->frames, "frames to stream")->capture_default_str();
  sub->add_option("--height", a->height, "frame height")->capture_default_str();
  sub->add_option("--width", a->width, "frame width")->capture_default_str();
  sub->add_option("--scale-frames", a->stream.scale_frames, "phase-1 frames")
      ->capture_default_str();
  sub->add_option("--window", a->stream.window, "sliding window")->capture_default_str();
  sub->add_option("--keyframe-interval", a->stream.keyframe_interval, "keyframe interval")
      ->capture_default_str();
  sub->add_option("--camera-iterations", a->stream.camera_iterations, "camera iterations")
      ->capture_default_str();
  sub->add_option("--max-special-frames", a->stream.max_special_frames,
                  "keep the special tokens of only this many evicted frames (0 = all)")
      ->capture_default_str();
  sub->add_option("--warmup", a->warmup, "streamed frames of an untimed warm-up sequence")
      ->capture_default_str();
  sub->add_option("--profile-every", a->profile_every,
                  "with LINGBOT_PROFILE=1 (or host), a breakdown per this many frames (0 = one)")
      ->check(kNonNegative);
  sub->add_option("--streams", a->streams,
                  "sessions streaming at once, each from its own thread (batched steps)")
      ->check(kPositive)
      ->capture_default_str();
  sub->add_option("--rate", a->rate,
                  "feed each stream as a live camera at this many frames/s, each result "
                  "delivered as soon as it is computed (0 = as fast as it goes)")
      ->check(kNonNegative)
      ->capture_default_str();
  sub->add_flag("--stagger", a->stagger,
                "with --rate: spread the cameras' capture times over one frame period");
  sub->add_option("--json", a->json, "also write the numbers as JSON");
  commands().push_back({sub, [a] { return bench(*a); }});
}

}  // namespace lingbot::cli
