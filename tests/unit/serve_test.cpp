// The stream server (`lingbot-map serve`) over loopback with real sockets: concurrent clients
// get the results each stream gets alone, in order; a killed client frees its session; bad
// messages end their stream with a reason and never the server; admission control refuses what
// does not fit; the token; /metrics and /v1/info; many streams leave the server as it was.
// Waits are for conditions, never for a speed.
#ifdef LINGBOT_HAVE_SERVER
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>

#include "camera_streams.h"
#include "lingbot/error.h"
#include "lingbot/image.h"
#include "lingbot/preflight.h"
#include "lingbot/server.h"
#include "serve/admission.h"
#include "serve/metrics.h"
#include "serve/protocol.h"
#include "serve/worker.h"
#include "serve_client.h"
#include "test_util.h"

namespace lingbot {
namespace {

using namespace test::serve;
using test::streams::Camera;

// One CPU thread per model step: the sessions run on threads of their own already.
const EngineOptions kTiny{.model = "synthetic:1", .arch = "tiny", .threads = 1};

// The tiny fixture's frames as the files' bytes (PNG) and as raw RGB messages.
struct Frames {
  std::vector<std::string> png, raw;
  int width = 0, height = 0;
};

const Frames& frames() {
  static const Frames f = [] {
    Frames f;
    for (const std::string& path : list_images(test::fixtures_dir() + "/tiny/frames")) {
      std::ifstream in(path, std::ios::binary);
      std::stringstream ss;
      ss << in.rdbuf();
      f.png.push_back(ss.str());
      const ImageU8 img = load_image(path);
      std::string raw = "LBR1";
      for (uint32_t v : {uint32_t(img.height), uint32_t(img.width), 3u})
        for (int b = 0; b < 4; ++b) raw += char((v >> (8 * b)) & 0xff);
      raw.append(img.rgb.begin(), img.rgb.end());
      f.raw.push_back(std::move(raw));
      f.width = img.width;
      f.height = img.height;
    }
    return f;
  }();
  return f;
}

json start_message(const StreamOptions& s, bool maps = true, int64_t n = 0) {
  return {{"type", "start"},
          {"width", frames().width},
          {"height", frames().height},
          {"preprocess", "none"},
          {"frames", n},
          {"maps", maps},
          {"stream",
           {{"scale_frames", s.scale_frames},
            {"window", s.window},
            {"keyframe_interval", s.keyframe_interval},
            {"flow_threshold", s.flow_threshold},
            {"max_non_keyframe_gap", s.max_non_keyframe_gap}}}};
}

// Camera i of the batched-session tests, as messages: frame t is fixture frame (t + 3i) % 16.
Script camera_script(const Camera& cam, size_t i, bool png) {
  Script s;
  s.text(start_message(cam.options).dump());
  const size_t n = frames().raw.size();
  for (size_t t = 0; t < cam.frames.size(); ++t)
    s.binary(png ? frames().png[(t + 3 * i) % n] : frames().raw[(t + 3 * i) % n]);
  s.text(R"({"type":"finish"})");
  return s;
}

class Serve : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { engine_ = Engine::create(kTiny).release(); }
  static void TearDownTestSuite() {
    delete engine_;
    engine_ = nullptr;
  }
  std::unique_ptr<StreamServer> serve(ServerOptions o = {}) {
    o.port = 0;
    o.engines = {{engine_, kTiny}};
    auto s = std::make_unique<StreamServer>(o);
    s->start();
    return s;
  }
  // Polls the server's own counters until `done` (a session ends on its worker's thread after
  // the client has gone). The deadline only catches a hang; no speed is assumed below it.
  static bool eventually(const std::function<bool()>& done) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
    while (!done()) {
      if (std::chrono::steady_clock::now() > deadline) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return true;
  }
  static bool idle(const StreamServer& s) {
    const ServerStats st = s.stats();
    return st.sessions == 0 && st.devices.at(0).reserved_bytes == 0 &&
           st.devices.at(0).sessions == 0;
  }
  static Engine* engine_;
};
Engine* Serve::engine_ = nullptr;

// Prometheus text: "name{labels} value" lines, comments skipped.
std::map<std::string, double> parse_metrics(const std::string& text) {
  std::map<std::string, double> m;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    const size_t sp = line.rfind(' ');
    m[line.substr(0, sp)] = std::stod(line.substr(sp + 1));
  }
  return m;
}

TEST_F(Serve, ConcurrentClientsGetTheResultsOfEachStreamAloneInOrder) {
  const std::vector<Camera> cams = test::streams::cameras(4);
  std::vector<test::streams::Results> alone;
  for (const Camera& cam : cams) alone.push_back(test::streams::run_alone(*engine_, cam));
  auto server = serve();
  std::vector<Stream> got(cams.size());
  std::vector<std::thread> clients;
  for (size_t i = 0; i < cams.size(); ++i)
    clients.emplace_back(
        [&, i] { got[i] = stream(server->port(), camera_script(cams[i], i, /*png=*/i == 1)); });
  for (auto& c : clients) c.join();
  int64_t frames_sent = 0;
  for (size_t i = 0; i < cams.size(); ++i) {
    const std::string what = "client " + std::to_string(i);
    ASSERT_TRUE(got[i].error.empty()) << what << ": " << got[i].describe();
    ASSERT_NE(got[i].find("ready"), nullptr) << what;
    EXPECT_EQ(got[i].texts.front().at("type"), "ready") << what;
    const json* fin = got[i].find("finished");
    ASSERT_NE(fin, nullptr) << what;
    EXPECT_EQ(fin->at("frames"), cams[i].frames.size()) << what;
    EXPECT_EQ(got[i].texts.back().at("type"), "finished") << what;
    EXPECT_EQ(got[i].close_code, 1000) << what;
    // In order, none lost (expect_same checks the indices), equal to the stream alone.
    test::streams::expect_same(got[i].results(), alone[i], what);
    frames_sent += static_cast<int64_t>(cams[i].frames.size());
  }
  ASSERT_TRUE(eventually([&] { return idle(*server); }));

  const HttpReply r = get(server->port(), "/metrics");
  ASSERT_EQ(r.status, 200);
  const auto m = parse_metrics(r.body);
  EXPECT_EQ(m.at("lingbot_frames_total"), double(frames_sent));
  EXPECT_EQ(m.at("lingbot_frame_latency_seconds_count"), double(frames_sent));
  EXPECT_EQ(m.at("lingbot_sessions_total{outcome=\"finished\"}"), double(cams.size()));
  EXPECT_EQ(m.at("lingbot_sessions_total{outcome=\"error\"}"), 0);
  EXPECT_EQ(m.at("lingbot_sessions_active"), 0);
  EXPECT_EQ(m.at("lingbot_device_memory_reserved_bytes{device=\"cpu\"}"), 0);
  EXPECT_GT(m.at("lingbot_device_memory_free_bytes{device=\"cpu\"}"), 0);
  EXPECT_GE(m.at("lingbot_frame_latency_seconds{quantile=\"0.99\"}"),
            m.at("lingbot_frame_latency_seconds{quantile=\"0.5\"}"));
  EXPECT_EQ(server->stats().frames, frames_sent);
#if defined(__GLIBC__)
  // The process's own memory, for operators and the load test's leak check.
  EXPECT_GT(m.at("process_resident_memory_bytes"), 1e6);
#if !defined(__SANITIZE_ADDRESS__)
  EXPECT_GT(m.at("lingbot_heap_in_use_bytes"), 1e5);
#endif
#endif
}

TEST_F(Serve, AClientKilledMidStreamFreesItsSession) {
  auto server = serve();
  StreamOptions o{.scale_frames = 2, .window = 4};
  Script s;
  s.text(start_message(o).dump());
  for (int t = 0; t < 8; ++t) s.binary(frames().raw[t]);
  s.drop_after = 6;  // the start and five frames, then gone once a reply has come
  const Stream got = stream(server->port(), s);
  EXPECT_NE(got.find("ready"), nullptr);
  ASSERT_TRUE(eventually([&] { return idle(*server); }));
  const ServerStats st = server->stats();
  EXPECT_EQ(st.disconnected, 1);
  EXPECT_EQ(st.finished, 0);
  // The server goes on: a whole stream after it.
  Script again;
  again.text(start_message(o).dump());
  for (int t = 0; t < 3; ++t) again.binary(frames().raw[t]);
  again.text(R"({"type":"finish"})");
  const Stream ok = stream(server->port(), again);
  ASSERT_NE(ok.find("finished"), nullptr) << ok.error;
  EXPECT_EQ(ok.results().size(), 3u);
}

TEST_F(Serve, BadMessagesEndTheirStreamWithAReasonNotTheServer) {
  ServerOptions o;
  o.max_frame_bytes = 64 * 1024;
  auto server = serve(o);
  const std::string start = start_message({.scale_frames = 2}).dump();
  std::string png_garbage = frames().png[0].substr(0, 64) + std::string(100, 'x');
  struct Case {
    const char* what;
    std::vector<std::pair<bool, std::string>> messages;
    int code;
  };
  const std::vector<Case> cases = {
      {"not JSON", {{false, "hello"}}, 1008},
      {"unknown field", {{false, R"({"type":"start","width":56,"height":42,"colour":1})"}}, 1008},
      {"unknown stream field",
       {{false, R"({"type":"start","width":56,"height":42,"stream":{"x":1}})"}},
       1008},
      {"missing size", {{false, R"({"type":"start"})"}}, 1008},
      {"unknown type", {{false, R"({"type":"go"})"}}, 1008},
      {"frame before start", {{true, frames().raw[0]}}, 1008},
      {"finish before start", {{false, R"({"type":"finish"})"}}, 1008},
      {"second start", {{false, start}, {false, start}}, 1008},
      {"wrong-size frame",
       {{false, start},
        {true, std::string("LBR1\x02\0\0\0\x02\0\0\0\x03\0\0\0", 16) + std::string(12, 'a')}},
       1008},
      {"raw frame shorter than its header says",
       {{false, start}, {true, frames().raw[0].substr(0, 1000)}},
       1008},
      {"undecodable bytes", {{false, start}, {true, "hello, not a picture"}}, 1008},
      {"broken PNG", {{false, start}, {true, png_garbage}}, 1008},
      {"oversized frame", {{false, start}, {true, std::string(100 * 1024, 'x')}}, 1009},
      {"oversized text", {{false, std::string(5000, ' ')}}, 1009},
  };
  for (const Case& c : cases) {
    Script s;
    s.messages = c.messages;
    const Stream got = stream(server->port(), s);
    ASSERT_TRUE(got.handshake) << c.what;
    const json* err = got.find("error");
    ASSERT_NE(err, nullptr) << c.what << ": no error message; " << got.error;
    const std::string reason = err->at("reason");
    EXPECT_FALSE(reason.empty()) << c.what;
    EXPECT_EQ(reason.find('\n'), std::string::npos) << c.what;
    EXPECT_EQ(got.close_code, c.code) << c.what << ": " << reason;
  }
  ASSERT_TRUE(eventually([&] { return idle(*server); }));
  EXPECT_EQ(server->stats().errors, int64_t(cases.size()));
  // Unknown paths and the health check.
  EXPECT_EQ(get(server->port(), "/nowhere").status, 404);
  EXPECT_EQ(get(server->port(), "/healthz").body, "ok\n");
  // A good stream after all that.
  Script good;
  good.text(start);
  good.binary(frames().png[0]);
  good.binary(frames().raw[1]);
  good.text(R"({"type":"finish"})");
  const Stream ok = stream(server->port(), good);
  ASSERT_NE(ok.find("finished"), nullptr) << ok.error;
  EXPECT_EQ(ok.results().size(), 2u);
}

TEST_F(Serve, AdmissionRefusesWhatDoesNotFitBesideTheStreamsAdmitted) {
  const StreamOptions so{.scale_frames = 2, .window = 3};
  // What one such stream reserves: its preflight, beside the weights.
  const MemoryEstimate need = preflight({.engine = kTiny,
                                         .height = frames().height,
                                         .width = frames().width,
                                         .frames = so.scale_frames + so.window,
                                         .stream = so,
                                         .results = {.predictions = false, .on_host = true}})
                                  .need;
  const size_t one = need.total - need.weights;
  ServerOptions o;
  o.memory_budget = one + one / 2;  // room for one stream, not two
  auto server = serve(o);

  // The first stream stays open (no finish) while the second asks.
  Script first;
  first.text(start_message(so, false).dump());
  first.binary(frames().raw[0]);
  StreamClient holder(server->port(), first);
  Stream held;
  std::thread holding([&] { held = holder.run(); });
  ASSERT_TRUE(eventually([&] { return server->stats().sessions == 1; }));
  Script second;
  second.text(start_message(so, false).dump());
  const Stream refused = stream(server->port(), second);
  holder.drop();
  holding.join();
  const json* r = refused.find("refused");
  ASSERT_NE(r, nullptr) << refused.error;
  EXPECT_EQ(r->at("need_bytes").get<size_t>(), one);
  EXPECT_LT(r->at("free_bytes").get<size_t>(), one);
  EXPECT_EQ(refused.close_code, 1013);
  EXPECT_NE(held.find("ready"), nullptr);
  EXPECT_EQ(held.find("ready")->at("estimate_bytes").get<size_t>(), one);

  // Once the first has gone, the same stream is admitted.
  ASSERT_TRUE(eventually([&] { return idle(*server); }));
  Script third = second;
  third.binary(frames().raw[0]);
  third.text(R"({"type":"finish"})");
  const Stream ok = stream(server->port(), third);
  EXPECT_NE(ok.find("finished"), nullptr) << ok.error;
  EXPECT_EQ(server->stats().refused, 1);

  // A budget smaller than any stream refuses every one, with the numbers, and nothing breaks.
  o.memory_budget = 1000;
  auto tight = serve(o);
  const Stream no = stream(tight->port(), second);
  ASSERT_NE(no.find("refused"), nullptr);
  EXPECT_EQ(no.find("refused")->at("free_bytes").get<size_t>(), 1000u);
}

TEST_F(Serve, TheTokenIsRequiredWhereSetAndAccepted) {
  ServerOptions o;
  o.token = "s3cret-token";
  auto server = serve(o);
  EXPECT_EQ(get(server->port(), "/healthz").status, 200);  // for load balancers
  EXPECT_EQ(get(server->port(), "/metrics").status, 401);
  EXPECT_EQ(get(server->port(), "/metrics", "wrong").status, 401);
  EXPECT_EQ(get(server->port(), "/metrics", "s3cret-token").status, 200);
  EXPECT_EQ(get(server->port(), "/v1/info?token=s3cret-token").status, 200);
  EXPECT_EQ(get(server->port(), "/v1/info?token=s3cret-tokem").status, 401);
  Script s;
  s.target = "/v1/stream?token=nope";
  s.text(start_message({.scale_frames = 1}).dump());
  EXPECT_FALSE(stream(server->port(), s).handshake);
  s.target = "/v1/stream?token=s3cret-token";
  s.binary(frames().raw[0]);
  s.text(R"({"type":"finish"})");
  const Stream ok = stream(server->port(), s);
  EXPECT_NE(ok.find("finished"), nullptr) << ok.error;
}

TEST_F(Serve, InfoDescribesTheModelDevicesAndLiveSessions) {
  auto server = serve();
  const HttpReply r = get(server->port(), "/v1/info");
  ASSERT_EQ(r.status, 200);
  const json j = json::parse(r.body);
  EXPECT_EQ(j.at("model").at("arch"), "tiny");
  EXPECT_GT(j.at("model").at("parameters").get<size_t>(), 0u);
  EXPECT_EQ(j.at("model").at("kv_cache"), "F32");  // the tiny model on the CPU, precision auto
  ASSERT_EQ(j.at("devices").size(), 1u);
  EXPECT_EQ(j.at("devices")[0].at("device"), "cpu");
  EXPECT_EQ(j.at("devices")[0].at("sessions"), 0);
  EXPECT_TRUE(j.at("sessions").empty());
}

// Many short streams in rounds: every frame answered, and afterwards the server holds what it
// held before (no session, no reservation, the counters exactly the frames sent).
TEST_F(Serve, LoadLeavesTheServerAsItWas) {
  ServerOptions o;
  o.max_sessions = 4;
  auto server = serve(o);
  const StreamOptions so{.scale_frames = 2, .window = 3};
  const int rounds = 3, clients = 4, per_client = 5;
  for (int round = 0; round < rounds; ++round) {
    std::vector<Stream> got(clients);
    std::vector<std::thread> threads;
    for (int c = 0; c < clients; ++c)
      threads.emplace_back([&, c] {
        Script s;
        s.text(start_message(so, c % 2 == 0, per_client).dump());
        for (int t = 0; t < per_client; ++t) s.binary(frames().raw[(t + c + round) % 16]);
        s.text(R"({"type":"finish"})");
        got[c] = stream(server->port(), s);
      });
    for (auto& t : threads) t.join();
    for (int c = 0; c < clients; ++c) {
      const auto results = got[c].results();
      ASSERT_EQ(results.size(), size_t(per_client)) << "round " << round << " client " << c;
      for (int t = 0; t < per_client; ++t) EXPECT_EQ(results[t].index, t);
    }
    ASSERT_TRUE(eventually([&] { return idle(*server); }));
  }
  const ServerStats st = server->stats();
  EXPECT_EQ(st.frames, int64_t(rounds) * clients * per_client);
  EXPECT_EQ(st.finished, rounds * clients);
  EXPECT_EQ(st.errors + st.refused + st.disconnected, 0);
  EXPECT_EQ(st.devices.at(0).reserved_bytes, 0u);
}

TEST_F(Serve, AConnectionThatNeverStartsIsClosedAfterTheStartTimeout) {
  ServerOptions o;
  o.start_timeout_s = 1;
  auto server = serve(o);
  const auto t0 = std::chrono::steady_clock::now();
  const Stream got = stream(server->port(), Script{});  // connects, then says nothing
  const double waited =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_TRUE(got.handshake);
  const json* err = got.find("error");
  ASSERT_NE(err, nullptr) << got.error;
  EXPECT_NE(err->at("reason").get<std::string>().find("start"), std::string::npos);
  EXPECT_EQ(got.close_code, 1008);
  EXPECT_GE(waited, 0.9);
  ASSERT_TRUE(eventually([&] { return idle(*server) && server->stats().errors == 1; }));
  // A stream that starts in time is not cut by the timer later.
  Script s;
  s.text(start_message({.scale_frames = 2}).dump());
  s.binary(frames().raw[0]);
  s.binary(frames().raw[1]);
  s.pause_before_last_ms = 1500;
  s.text(R"({"type":"finish"})");
  const Stream ok = stream(server->port(), s);
  ASSERT_NE(ok.find("finished"), nullptr) << ok.error;
  EXPECT_EQ(ok.results().size(), 2u);
}

TEST_F(Serve, StopClosesLiveStreams) {
  auto server = serve();
  Script s;
  s.text(start_message({.scale_frames = 2}).dump());
  s.binary(frames().raw[0]);
  Stream got;
  std::thread client([&] { got = stream(server->port(), s); });
  ASSERT_TRUE(eventually([&] { return server->stats().sessions == 1; }));
  server->stop();
  client.join();
  EXPECT_EQ(got.close_code, 1001);
  EXPECT_TRUE(idle(*server));
}

// A stream that has started and then sends nothing gives its slot back after the stream idle
// timeout, with a reason; one whose frames come closer together than that is not cut. Sixteen
// such idle streams would otherwise hold every slot of the server for minutes.
TEST_F(Serve, AStreamThatStopsSendingIsClosedAfterTheIdleTimeout) {
  ServerOptions o;
  o.max_sessions = 1;
  o.stream_idle_timeout_s = 1;
  auto server = serve(o);
  Script idle_stream;
  idle_stream.text(start_message({.scale_frames = 2}).dump());
  const auto t0 = std::chrono::steady_clock::now();
  const Stream got = stream(server->port(), idle_stream);
  const double waited =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_NE(got.find("ready"), nullptr) << got.describe();
  const json* err = got.find("error");
  ASSERT_NE(err, nullptr) << got.describe();
  EXPECT_NE(err->at("reason").get<std::string>().find("no frame for 1 s"), std::string::npos)
      << err->dump();
  EXPECT_EQ(got.close_code, 1008);
  EXPECT_GE(waited, 0.9);
  EXPECT_LT(waited, 30.0);  // not the HTTP layer's minutes
  ASSERT_TRUE(eventually([&] { return idle(*server); }));
  EXPECT_EQ(server->stats().errors, 1);
  // The slot is free again, and a stream that pauses less than the timeout finishes.
  Script s;
  s.text(start_message({.scale_frames = 2}).dump());
  s.binary(frames().raw[0]);
  s.binary(frames().raw[1]);
  s.pause_before_last_ms = 400;
  s.text(R"({"type":"finish"})");
  const Stream ok = stream(server->port(), s);
  ASSERT_NE(ok.find("finished"), nullptr) << ok.describe();
  EXPECT_EQ(ok.results().size(), 2u);
}

// The admission reserved memory for the frames the start message announced: a frame beyond
// them ends the stream with a reason instead of growing the session past its reservation.
TEST_F(Serve, FramesBeyondTheAnnouncedCountAreRefused) {
  auto server = serve();
  Script s;
  s.text(start_message({.scale_frames = 2}, false, 2).dump());
  for (int t = 0; t < 6; ++t) s.binary(frames().raw[t]);
  s.text(R"({"type":"finish"})");
  const Stream got = stream(server->port(), s);
  const json* err = got.find("error");
  ASSERT_NE(err, nullptr) << got.describe();
  EXPECT_NE(err->at("reason").get<std::string>().find("2 frames announced"), std::string::npos)
      << err->dump();
  EXPECT_EQ(got.close_code, 1008);
  EXPECT_EQ(got.find("finished"), nullptr);
  EXPECT_LE(got.results().size(), 2u);
  ASSERT_TRUE(eventually([&] { return idle(*server); }));
  EXPECT_EQ(server->stats().errors, 1);
  // The announced count itself is fine.
  Script exact;
  exact.text(start_message({.scale_frames = 2}, false, 2).dump());
  exact.binary(frames().raw[0]);
  exact.binary(frames().raw[1]);
  exact.text(R"({"type":"finish"})");
  const Stream ok = stream(server->port(), exact);
  ASSERT_NE(ok.find("finished"), nullptr) << ok.describe();
  EXPECT_EQ(ok.results().size(), 2u);
}

// A refusal for the session limit says how much memory is really free, not 0.
TEST_F(Serve, ASessionLimitRefusalReportsTheFreeBytes) {
  ServerOptions o;
  o.max_sessions = 1;
  o.memory_budget = size_t{1} << 34;
  auto server = serve(o);
  Script first;
  first.text(start_message({.scale_frames = 2}, false).dump());
  first.binary(frames().raw[0]);
  StreamClient holder(server->port(), first);
  Stream held;
  std::thread holding([&] { held = holder.run(); });
  ASSERT_TRUE(eventually([&] { return server->stats().sessions == 1; }));
  Script second;
  second.text(start_message({.scale_frames = 2}, false).dump());
  const Stream refused = stream(server->port(), second);
  const size_t reserved = server->stats().devices.at(0).reserved_bytes;
  holder.drop();
  holding.join();
  const json* r = refused.find("refused");
  ASSERT_NE(r, nullptr) << refused.describe();
  EXPECT_NE(r->at("reason").get<std::string>().find("maximum of 1 streams"), std::string::npos);
  EXPECT_GT(reserved, 0u);
  EXPECT_EQ(r->at("free_bytes").get<size_t>(), o.memory_budget - reserved);
  EXPECT_EQ(refused.close_code, 1013);
  ASSERT_TRUE(eventually([&] { return idle(*server); }));
}

// What operations see: a close for a WebSocket protocol error (1007, a text message that is not
// UTF-8) counts as an error in lingbot_sessions_total, before "start" and mid-stream alike; a
// client that vanishes counts as disconnected; each refused or broken connection has one line
// in the log with its reason and peer.
TEST_F(Serve, ProtocolErrorsAndRefusalsAreCountedAndLogged) {
  ServerOptions o;
  o.token = "t0ken";
  auto server = serve(o);
  const std::string not_utf8 = "{\"type\":\"\xff\xfe\"}";
  testing::internal::CaptureStderr();
  Script before;
  before.target = "/v1/stream?token=t0ken";
  before.text(not_utf8);
  const Stream a = stream(server->port(), before);
  Script mid = before;
  mid.messages.clear();
  mid.text(start_message({.scale_frames = 2}).dump());
  mid.binary(frames().raw[0]);
  mid.text(not_utf8);
  const Stream b = stream(server->port(), mid);
  Script dropped = mid;
  dropped.messages.pop_back();
  dropped.binary(frames().raw[1]);
  dropped.binary(frames().raw[2]);
  dropped.drop_after = 3;
  const Stream c = stream(server->port(), dropped);
  Script no_token;
  no_token.text(start_message({.scale_frames = 2}).dump());
  const Stream d = stream(server->port(), no_token);
  const bool settled = eventually([&] {
    const ServerStats st = server->stats();
    return idle(*server) && st.errors == 2 && st.disconnected == 1;
  });
  const std::string log = testing::internal::GetCapturedStderr();
  ASSERT_TRUE(settled) << server->stats().errors << " errors, " << server->stats().disconnected
                       << " disconnected; log:\n"
                       << log;
  EXPECT_EQ(a.close_code, 1007) << a.describe();
  EXPECT_EQ(b.close_code, 1007) << b.describe();
  EXPECT_NE(c.find("ready"), nullptr) << c.describe();
  EXPECT_FALSE(d.handshake);
  const auto metrics = parse_metrics(get(server->port(), "/metrics", "t0ken").body);
  EXPECT_EQ(metrics.at("lingbot_sessions_total{outcome=\"error\"}"), 2);
  EXPECT_EQ(metrics.at("lingbot_sessions_total{outcome=\"disconnected\"}"), 1);
  // One line each: two protocol errors, one lost connection, one wrong token.
  const auto lines_with = [&](const std::string& what) {
    int n = 0;
    std::istringstream in(log);
    for (std::string line; std::getline(in, line);)
      n += line.find(what) != std::string::npos && line.find("127.0.0.1:") != std::string::npos;
    return n;
  };
  EXPECT_EQ(lines_with("WebSocket protocol error"), 2) << log;
  EXPECT_EQ(lines_with("connection lost mid-stream"), 1) << log;
  EXPECT_EQ(lines_with("missing or wrong token"), 1) << log;
}

// Threads of this process now.
int process_threads() {
  int n = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator("/proc/self/task")) ++n;
  return n;
}

// serve --threads N bounds each stream: its worker thread runs the model's parallel regions
// with N threads (here 1: no OpenMP thread beside the worker), not with one per core.
TEST_F(Serve, AStreamRunsWithinTheEnginesThreads) {
  if (std::thread::hardware_concurrency() < 2) GTEST_SKIP() << "one core: nothing to bound";
  auto server = serve();
  const int before = process_threads();  // the network thread included
  std::atomic<bool> streaming{true};
  std::atomic<int> peak{0};
  std::thread sampler([&] {
    while (streaming) {
      peak = std::max(peak.load(), process_threads());
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  });
  Script s;
  s.text(start_message({.scale_frames = 2, .window = 4}).dump());
  for (int t = 0; t < 6; ++t) s.binary(frames().raw[t]);
  s.text(R"({"type":"finish"})");
  const Stream ok = stream(server->port(), s);
  streaming = false;
  sampler.join();
  ASSERT_NE(ok.find("finished"), nullptr) << ok.describe();
  // The sampler and the session's worker: nothing else.
  EXPECT_LE(peak.load() - before, 2)
      << before << " threads before the stream, " << peak.load() << " at its peak";
}

// The session worker's queues: a client that sends frames but reads nothing gets at most
// `max_out` messages queued; the worker then waits (the session pauses), its `queue` frames fill,
// and the connection would stop reading. Reading one message lets it go on.
TEST_F(Serve, AClientThatReadsNothingPausesItsSessionWithBoundedQueues) {
  serve::Admission admission({{"cpu", size_t{1} << 40}});
  ASSERT_EQ(admission.admit({1000}).device, 0);
  serve::Metrics metrics;
  const serve::Start start =
      serve::parse_client_text(start_message({.scale_frames = 1}, false).dump(), {}).start;
  serve::SessionWorker worker(
      {.engine = engine_,
       .start = start,
       .id = "1",
       .queue = 2,
       .max_out = 3,
       .reservation = std::make_unique<serve::Reservation>(admission, 0, 1000),
       .metrics = &metrics,
       .wake = [] {}});
  metrics.started("1", "cpu");
  // Frames pushed as the connection reads them, while the worker wants more: frames 0..2 give
  // 3 results (the limit), frame 3's result waits, 4 and 5 fill the read-ahead; then the
  // connection would stop reading.
  int pushed = 0;
  ASSERT_TRUE(eventually([&] {
    while (pushed < 6 && worker.wants_frames())
      worker.push(frames().raw[pushed++], serve::Clock::now());
    return pushed == 6 && !worker.wants_frames();
  }));
  std::vector<serve::Outgoing> got;
  while (auto m = worker.pop()) got.push_back(std::move(*m));
  EXPECT_EQ(got.size(), 3u);  // the results of frames 0..2; frame 3's waits for room
  // Each message taken makes room for the next result, until all six are out.
  ASSERT_TRUE(eventually([&] {
    while (auto m = worker.pop()) got.push_back(std::move(*m));
    return got.size() == 6;
  }));
  for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(json::parse(got[i].data).at("index"), i);
  worker.stop();
  EXPECT_EQ(admission.devices()[0].reserved_bytes, 0u);
  EXPECT_EQ(metrics.stats().sessions, 0);
}

#ifdef LINGBOT_HAVE_VIEWER
// serve --view: the viewer's page, and a browser attached to a live stream gets its frames in
// the viewer's wire format.
TEST_F(Serve, TheViewerAttachesToALiveStream) {
  ServerOptions o;
  o.view = true;
  o.token = "t0ken";
  auto server = serve(o);
  const HttpReply page = get(server->port(), "/");  // the page needs no token
  EXPECT_EQ(page.status, 200);
  EXPECT_NE(page.body.find("<html"), std::string::npos);

  Script s;  // stays open: no finish
  s.target = "/v1/stream?token=t0ken";
  s.text(start_message({.scale_frames = 2}).dump());
  for (int t = 0; t < 3; ++t) s.binary(frames().raw[t]);
  StreamClient holder(server->port(), s);
  Stream held;
  std::thread holding([&] { held = holder.run(); });
  ASSERT_TRUE(eventually([&] { return server->stats().frames == 3; }));

  asio::io_context ioc;
  websocket::stream<tcp::socket> browser(ioc);
  browser.next_layer().connect(
      {asio::ip::make_address("127.0.0.1"), static_cast<unsigned short>(server->port())});
  beast::error_code ec;
  browser.handshake("127.0.0.1", "/ws?session=1&token=t0ken", ec);
  ASSERT_FALSE(ec) << ec.message();
  int frame_messages = 0;
  bool hello = false;
  while (frame_messages < 3) {
    beast::flat_buffer b;
    browser.read(b);
    const std::string m = beast::buffers_to_string(b.data());
    if (browser.got_text()) {
      hello |= json::parse(m).at("type") == "hello";
    } else {
      uint32_t type;
      std::memcpy(&type, m.data(), 4);
      frame_messages += type == 1;
    }
  }
  EXPECT_TRUE(hello);
  browser.next_layer().close();

  // No such stream, or no token: refused at the handshake.
  for (const char* target : {"/ws?session=7&token=t0ken", "/ws?session=1"}) {
    websocket::stream<tcp::socket> other(ioc);
    other.next_layer().connect(
        {asio::ip::make_address("127.0.0.1"), static_cast<unsigned short>(server->port())});
    other.handshake("127.0.0.1", target, ec);
    EXPECT_TRUE(ec) << target;
  }
  holder.drop();
  holding.join();
  EXPECT_NE(held.find("ready"), nullptr);
  ASSERT_TRUE(eventually([&] { return idle(*server); }));
}
#endif

TEST(ServeProtocol, StartMessagesAndFrameHeaders) {
  const auto c = serve::parse_client_text(
      R"({"type":"start","width":640,"height":480,"frames":10,"stream":{"window":16}})", {});
  EXPECT_EQ(c.start.model_width, 518);
  EXPECT_EQ(c.start.model_height, 392);  // 480 * 518 / 640 = 388.5, to a multiple of 14
  EXPECT_EQ(c.start.stream.window, 16);
  EXPECT_EQ(c.start.stream.scale_frames, 8);
  const auto pad = serve::parse_client_text(
      R"({"type":"start","width":640,"height":480,"preprocess":"pad","target":280})", {});
  EXPECT_EQ(pad.start.model_width, 280);
  EXPECT_EQ(pad.start.model_height, 280);
  for (const char* bad :
       {R"({"type":"start","width":0,"height":10})", R"({"type":"start","width":10.5,"height":10})",
        R"({"type":"start","width":10,"height":10,"target":500})",
        R"({"type":"start","width":30,"height":28,"preprocess":"none"})",
        R"({"type":"start","width":10,"height":10,"stream":{"window":0}})",
        R"({"type":"start","width":10,"height":10,"stream":[]})", R"({"type":"finish","x":1})",
        "[]", "", "\xff"}) {
    try {
      serve::parse_client_text(bad, {});
      ADD_FAILURE() << "accepted: " << bad;
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos);
    }
  }
  const std::string& raw = frames().raw[0];
  const auto h =
      serve::parse_frame_header(reinterpret_cast<const uint8_t*>(raw.data()), raw.size());
  EXPECT_EQ(h.format, serve::FrameHeader::Format::Raw);
  EXPECT_EQ(h.width, frames().width);
  EXPECT_THROW(serve::parse_frame_header(reinterpret_cast<const uint8_t*>(raw.data()), 20), Error);
}

}  // namespace
}  // namespace lingbot
#endif
