// The browser viewer's server side: the control-message parser, the frame encoding read back
// against frame_points, and the server with real sockets: what a browser receives, a port in
// use, and a client that stops reading (it must not slow the producer or grow the memory).
#ifdef LINGBOT_HAVE_VIEWER
#include <utility>
// clang-format off
#include <boost/asio.hpp>
#include <boost/beast.hpp>
// clang-format on
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <fstream>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "lingbot/error.h"
#include "lingbot/result.h"
#include "lingbot/viewer.h"
#include "viewer/control.h"
#include "viewer/scene.h"

namespace lingbot {
namespace {

namespace beast = boost::beast;
namespace websocket = beast::websocket;
namespace net = boost::asio;
using tcp = net::ip::tcp;
using Clock = std::chrono::steady_clock;

FrameResult test_frame(int64_t index, int w, int h) {
  FrameResult f;
  f.index = index;
  f.width = w;
  f.height = h;
  f.intrinsics = {100, 0, w / 2.0f, 0, 100, h / 2.0f, 0, 0, 1};
  f.c2w = {1, 0, 0, 0.1f * index, 0, 1, 0, 0, 0, 0, 1, 0};
  f.depth.resize(size_t(w) * h);
  f.confidence.resize(size_t(w) * h);
  for (int i = 0; i < w * h; ++i) {
    f.depth[i] = 2.0f + 0.5f * std::sin(0.01f * i);
    f.confidence[i] = 1.0f + float(i % 7);
  }
  return f;
}

template <class T>
T read_at(const std::string& s, size_t offset) {
  T v;
  std::memcpy(&v, s.data() + offset, sizeof v);
  return v;
}

TEST(ViewerControl, ParsesThePingAndImagesMessages) {
  auto c = viewer::parse_control(R"({"op":"ping","id":42})");
  EXPECT_EQ(c.op, viewer::Control::Op::Ping);
  EXPECT_EQ(c.id, 42);
  c = viewer::parse_control(R"({"op":"images","on":false})");
  EXPECT_EQ(c.op, viewer::Control::Op::Images);
  EXPECT_FALSE(c.on);
}

TEST(ViewerControl, RejectsMalformedMessagesWithOneLine) {
  for (const char* bad : {"", "not json", "[1,2]", "{}", R"({"op":1})", R"({"op":"fly"})",
                          R"({"op":"ping","id":"x"})", R"({"op":"images"})",
                          R"({"op":"images","on":1})", "{\"op\":\"ping\"", "\xff\xfe"}) {
    try {
      viewer::parse_control(bad);
      ADD_FAILURE() << "accepted: " << bad;
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos);
    }
  }
  EXPECT_THROW(viewer::parse_control("{\"op\":\"ping\",\"id\":1" +
                                     std::string(viewer::kMaxControlBytes, ' ') + "}"),
               Error);
}

TEST(ViewerEncoding, FrameMessageHoldsFramePointsWithinTheQuantisationStep) {
  const FrameResult f = test_frame(3, 40, 30);
  Tensor rgb = Tensor::zeros({3, 30, 40}, DType::U8);
  for (int64_t i = 0; i < rgb.numel(); ++i) rgb.data<uint8_t>()[i] = uint8_t(i * 7);
  const PointOptions options{.conf_threshold = 1.0f, .stride = 2};
  const FramePoints want = frame_points(f, &rgb, options);
  int64_t n = 0;
  const std::string m = viewer::encode_frame(f, &rgb, options, {1, 2, 3}, &n);
  ASSERT_EQ(n, want.size());
  ASSERT_GT(n, 0);
  ASSERT_EQ(m.size(), viewer::kFrameHeaderBytes + 10 * size_t(n));
  EXPECT_EQ(read_at<uint32_t>(m, 0), viewer::kFrame);
  EXPECT_EQ(read_at<uint32_t>(m, 4), 3u);
  EXPECT_EQ(read_at<uint32_t>(m, 12), uint32_t(n));
  EXPECT_EQ(read_at<float>(m, 24 + 4 * 3), 0.3f);  // c2w[3]: tx
  EXPECT_EQ(uint8_t(m[132]), 1);
  for (int64_t i = 0; i < n; ++i) {
    for (int a = 0; a < 3; ++a) {
      const float offset = read_at<float>(m, 24 + 4 * (21 + a));
      const float step = read_at<float>(m, 24 + 4 * (24 + a));
      const int16_t q = read_at<int16_t>(m, viewer::kFrameHeaderBytes + 2 * (3 * i + a));
      const float x = offset + step * (float(q) + 32768.0f);
      EXPECT_NEAR(x, want.xyz[3 * i + a], step * 0.51f + 1e-6f);
      EXPECT_EQ(uint8_t(m[viewer::kFrameHeaderBytes + 6 * n + 3 * i + a]), want.rgb[3 * i + a]);
    }
    const uint8_t q = uint8_t(m[viewer::kFrameHeaderBytes + 9 * n + i]);
    EXPECT_NEAR(std::exp(q / viewer::kConfScale), want.confidence[i], want.confidence[i] * 0.013f);
  }
}

TEST(ViewerEncoding, ImageIsDownscaledToTheWidthAsked) {
  Tensor rgb = Tensor::zeros({3, 20, 64}, DType::F32);
  for (int64_t i = 0; i < rgb.numel(); ++i) rgb.f32()[i] = 0.5f;
  const std::string m = viewer::encode_image(7, rgb, 32);
  EXPECT_EQ(read_at<uint32_t>(m, 0), viewer::kImage);
  EXPECT_EQ(read_at<uint32_t>(m, 8), 32u);
  EXPECT_EQ(read_at<uint32_t>(m, 12), 10u);
  ASSERT_EQ(m.size(), 16u + 3 * 32 * 10);
  EXPECT_EQ(uint8_t(m[16]), 128);
}

// A browser: reads messages until the status says `frames` are in and finished.
struct Client {
  net::io_context ioc;
  websocket::stream<tcp::socket> ws{ioc};
  explicit Client(int port) {
    tcp::resolver r(ioc);
    net::connect(ws.next_layer(), r.resolve("127.0.0.1", std::to_string(port)));
    ws.handshake("127.0.0.1", "/ws");
  }
  // Counts frame messages and their points until a finished status with `frames`.
  std::pair<int64_t, int64_t> read_until_finished(int64_t frames) {
    int64_t got = 0, points = 0;
    for (;;) {
      beast::flat_buffer b;
      ws.read(b);
      const std::string s = beast::buffers_to_string(b.data());
      if (ws.got_text()) {
        const auto j = nlohmann::json::parse(s);
        if (j["type"] == "status" && j["finished"] == true && j["frames"] == frames) break;
      } else if (read_at<uint32_t>(s, 0) == viewer::kFrame) {
        ++got;
        points += read_at<uint32_t>(s, 12);
      }
    }
    return {got, points};
  }
};

// Connects and asks for the WebSocket, then never reads: the server's writes to it stall once
// the socket buffers fill.
struct StalledClient {
  net::io_context ioc;
  tcp::socket s{ioc};
  explicit StalledClient(int port) {
    s.open(tcp::v4());
    s.set_option(net::socket_base::receive_buffer_size(4096));
    s.connect({net::ip::make_address("127.0.0.1"), static_cast<unsigned short>(port)});
    const std::string req =
        "GET /ws HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n";
    net::write(s, net::buffer(req));
  }
};

int64_t rss_bytes() {
  std::ifstream f("/proc/self/statm");
  int64_t size = 0, resident = 0;
  f >> size >> resident;
  return resident * 4096;
}

TEST(ViewerServer, BrowsersGetEveryFrameIncludingOneThatJoinsLate) {
  ViewerServer server({.port = 0, .points = {.conf_threshold = 1.0f, .stride = 1}});
  server.start();
  ASSERT_GT(server.port(), 0);
  Client early(server.port());
  auto sink = server.sink(5);
  int64_t points = 0;
  for (int i = 0; i < 5; ++i) {
    const FrameResult f = test_frame(i, 32, 24);
    points += frame_points(f, nullptr, {.conf_threshold = 1.0f, .stride = 1}).size();
    sink->add(f, nullptr);
  }
  sink->finish();
  EXPECT_EQ(early.read_until_finished(5), std::make_pair(int64_t{5}, points));
  Client late(server.port());
  EXPECT_EQ(late.read_until_finished(5), std::make_pair(int64_t{5}, points));
  EXPECT_EQ(server.stats().points, points);
  // A malformed control message closes that connection and counts; the server stays up.
  late.ws.write(net::buffer(std::string("{\"op\":")));
  beast::flat_buffer b;
  beast::error_code ec;
  while (!ec) late.ws.read(b, ec);
  EXPECT_EQ(late.ws.reason().code, websocket::close_code::policy_error);
  EXPECT_EQ(server.stats().bad_messages, 1);
  Client again(server.port());
  EXPECT_EQ(again.read_until_finished(5).first, 5);
}

TEST(ViewerServer, LongRunIsThinnedToStayWithinMaxBytes) {
  // 50 frames of 64x48 points, ~30 KB each: 1.5 MB against a 1 MB limit.
  ViewerServer server(
      {.port = 0, .points = {.conf_threshold = 1.0f, .stride = 1}, .max_bytes = 1 << 20});
  server.start();
  auto sink = server.sink(50);
  int64_t halves = 0;  // every other point of each frame
  for (int i = 0; i < 50; ++i) {
    const FrameResult f = test_frame(i, 64, 48);
    halves += (frame_points(f, nullptr, {.conf_threshold = 1.0f, .stride = 1}).size() + 1) / 2;
    sink->add(f, nullptr);
  }
  sink->finish();
  const ViewerStats s = server.stats();
  EXPECT_LE(s.bytes, 1 << 20);
  EXPECT_EQ(s.thinning, 2);
  EXPECT_EQ(s.points, halves);
  Client late(server.port());
  EXPECT_EQ(late.read_until_finished(50), std::make_pair(int64_t{50}, s.points));
}

TEST(ViewerEncoding, ThinningKeepsEveryKthPoint) {
  const FrameResult f = test_frame(0, 10, 3);
  const std::string m =
      viewer::encode_frame(f, nullptr, {.conf_threshold = 1.0f, .stride = 1}, {0, 0, 0});
  const size_t n = read_at<uint32_t>(m, 12), kept = (n + 3) / 4;  // points 0, 4, 8, ...
  const std::string t = viewer::thin_frame(m, 4);
  ASSERT_EQ(read_at<uint32_t>(t, 12), kept);
  ASSERT_EQ(t.size(), viewer::kFrameHeaderBytes + 10 * kept);
  const size_t h = viewer::kFrameHeaderBytes;
  EXPECT_EQ(t.compare(0, 12, m, 0, 12), 0);
  EXPECT_EQ(t.compare(16, h - 16, m, 16, h - 16), 0);
  for (size_t i = 0; i < kept; ++i) {
    EXPECT_EQ(t.compare(h + 6 * i, 6, m, h + 6 * 4 * i, 6), 0);                  // position
    EXPECT_EQ(t.compare(h + 6 * kept + 3 * i, 3, m, h + 6 * n + 12 * i, 3), 0);  // colour
    EXPECT_EQ(t[h + 9 * kept + i], m[h + 9 * n + 4 * i]);                        // confidence
  }
}

// What the server answers a raw HTTP request (its status line).
std::string status_line(int port, const std::string& request) {
  net::io_context ioc;
  tcp::socket s(ioc);
  s.connect({net::ip::make_address("127.0.0.1"), static_cast<unsigned short>(port)});
  net::write(s, net::buffer(request));
  std::string out;
  beast::error_code ec;
  net::read_until(s, net::dynamic_buffer(out), "\r\n", ec);
  return out.substr(0, out.find("\r\n"));
}

TEST(ViewerServer, OtherSitesPagesAndUnknownPathsAreRefused) {
  ViewerServer server({.port = 0});
  server.start();
  const std::string ws =
      "GET /ws HTTP/1.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
      "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n";
  const std::string host = "Host: 127.0.0.1:" + std::to_string(server.port()) + "\r\n";
  EXPECT_EQ(status_line(server.port(), ws + host + "\r\n"), "HTTP/1.1 101 Switching Protocols");
  EXPECT_EQ(status_line(server.port(), ws + host + "Origin: http://127.0.0.1:" +
                                           std::to_string(server.port()) + "\r\n\r\n"),
            "HTTP/1.1 101 Switching Protocols");
  // A page of another site, and a name rebound to 127.0.0.1.
  EXPECT_EQ(status_line(server.port(), ws + host + "Origin: https://example.com\r\n\r\n"),
            "HTTP/1.1 403 Forbidden");
  EXPECT_EQ(status_line(server.port(), "GET / HTTP/1.1\r\nHost: example.com:8080\r\n\r\n"),
            "HTTP/1.1 403 Forbidden");
  EXPECT_EQ(status_line(server.port(), "GET / HTTP/1.1\r\nHost: localhost\r\n\r\n"),
            "HTTP/1.1 200 OK");
  for (const char* path :
       {"/../etc/passwd", "/%2e%2e/etc/passwd", "/viewer.js/..", "//etc", "/index.html"})
    EXPECT_EQ(
        status_line(server.port(), std::string("GET ") + path + " HTTP/1.1\r\n" + host + "\r\n"),
        "HTTP/1.1 404 Not Found")
        << path;
  EXPECT_EQ(status_line(server.port(), "DELETE / HTTP/1.1\r\n" + host + "\r\n"),
            "HTTP/1.1 405 Method Not Allowed");
  // No request has a body: one ends the connection without an answer, as do headers beyond 8 KB.
  EXPECT_EQ(
      status_line(server.port(), "POST / HTTP/1.1\r\n" + host + "Content-Length: 5\r\n\r\nhello"),
      "");
  EXPECT_EQ(status_line(server.port(),
                        "GET / HTTP/1.1\r\n" + host + "X: " + std::string(10000, 'a') + "\r\n\r\n"),
            "");
}

// Raw upgrade requests for /ws, each on a socket of its own, all written before any answer is
// read: what a page reloaded by many browsers at once sends.
struct UpgradeBurst {
  net::io_context ioc;
  std::vector<std::unique_ptr<tcp::socket>> sockets;
  UpgradeBurst(int port, int n) {
    const std::string req =
        "GET /ws HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\n"
        "Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
        "Sec-WebSocket-Version: 13\r\n\r\n";
    for (int i = 0; i < n; ++i) {
      sockets.push_back(std::make_unique<tcp::socket>(ioc));
      sockets.back()->connect(
          {net::ip::make_address("127.0.0.1"), static_cast<unsigned short>(port)});
    }
    for (auto& s : sockets) net::write(*s, net::buffer(req));
  }
  // How many were switched to a WebSocket (101); every other one must be a 503.
  int admitted() {
    int n = 0;
    for (auto& s : sockets) {
      std::string out;
      beast::error_code ec;
      net::read_until(*s, net::dynamic_buffer(out), "\r\n", ec);
      const std::string line = out.substr(0, out.find("\r\n"));
      if (line == "HTTP/1.1 101 Switching Protocols")
        ++n;
      else
        EXPECT_EQ(line, "HTTP/1.1 503 Service Unavailable");
    }
    return n;
  }
  void close() {
    for (auto& s : sockets) {
      beast::error_code ignored;
      s->close(ignored);
    }
  }
};

// Polls `done` for at most 10 s (a browser's slot is given back on the server's thread).
bool within_seconds(const std::function<bool()>& done) {
  const auto deadline = Clock::now() + std::chrono::seconds(10);
  while (!done()) {
    if (Clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

// A browser's slot is taken when its upgrade is admitted and given back when it leaves, however
// it leaves, also once the run has finished (nothing is pumped any more): browsers that come
// and go never lock the later ones out.
TEST(ViewerServer, BrowserSlotsAreGivenBackWhenBrowsersLeaveAFinishedRun) {
  ViewerServer server({.port = 0, .max_clients = 4});
  server.start();
  auto sink = server.sink(1);
  sink->add(test_frame(0, 16, 12), nullptr);
  sink->finish();
  const std::string upgrade =
      "GET /ws HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
      "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n";
  for (int round = 0; round < 3; ++round) {
    std::vector<std::unique_ptr<Client>> browsers;
    for (int i = 0; i < 4; ++i) {
      if (round == 1 && i == 2) {  // one that drops its socket without a close handshake
        UpgradeBurst raw(server.port(), 1);
        EXPECT_EQ(raw.admitted(), 1) << "round " << round;
        raw.close();
        ASSERT_TRUE(within_seconds([&] { return server.stats().clients == 2; }));
      }
      ASSERT_NO_THROW(browsers.push_back(std::make_unique<Client>(server.port())))
          << "round " << round << ", browser " << i << ", " << server.stats().clients << " counted";
      browsers.back()->read_until_finished(1);
    }
    EXPECT_EQ(server.stats().clients, 4);
    EXPECT_EQ(status_line(server.port(), upgrade), "HTTP/1.1 503 Service Unavailable");
    for (auto& b : browsers) b->ws.close(websocket::close_code::normal);
    ASSERT_TRUE(within_seconds([&] { return server.stats().clients == 0; }))
        << server.stats().clients << " still counted";
  }
}

// The slot is taken before the handshake: a burst of upgrades admits exactly max_clients.
TEST(ViewerServer, ABurstOfUpgradesAdmitsNoMoreThanMaxClients) {
  ViewerServer server({.port = 0, .max_clients = 4});
  server.start();
  UpgradeBurst burst(server.port(), 20);
  EXPECT_EQ(burst.admitted(), 4);
  EXPECT_EQ(server.stats().clients, 4);
  burst.close();
  ASSERT_TRUE(within_seconds([&] { return server.stats().clients == 0; }));
  UpgradeBurst again(server.port(), 6);
  EXPECT_EQ(again.admitted(), 4);
}

TEST(ViewerServer, PortInUseIsOneClearError) {
  ViewerServer a({.port = 0});
  a.start();
  ViewerServer b({.port = a.port()});
  try {
    b.start();
    FAIL() << "second server bound the same port";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cannot listen on 127.0.0.1:" + std::to_string(a.port())),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(ViewerServer({.host = "not-an-address", .port = 0}).start(), Error);
}

// The sink's frames/s with a client that stops reading and without one, the same frames each
// time (large ones: 256x192 points, ~0.5 MB a message, 100 frames), and the memory the server
// holds beyond its encoded frames. printed for docs/PERFORMANCE.md.
TEST(ViewerServer, ClientThatStopsReadingDoesNotSlowTheProducerNorGrowMemory) {
  const int frames = 100;
  std::vector<FrameResult> input;
  for (int i = 0; i < frames; ++i) input.push_back(test_frame(i, 256, 192));
  auto feed = [&](bool stalled) {
    ViewerServer server({.port = 0, .points = {.conf_threshold = 1.0f, .stride = 1}});
    server.start();
    std::optional<StalledClient> stall;
    if (stalled) stall.emplace(server.port());
    Client reader(server.port());  // a browser that keeps up, beside it
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    const int64_t rss0 = rss_bytes();
    auto sink = server.sink(frames);
    const auto t0 = Clock::now();
    double worst_add = 0;
    for (const FrameResult& f : input) {
      const auto a0 = Clock::now();
      sink->add(f, nullptr);
      worst_add = std::max(worst_add, std::chrono::duration<double>(Clock::now() - a0).count());
    }
    sink->finish();
    const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    const auto [got, points] = reader.read_until_finished(frames);
    EXPECT_EQ(got, frames);
    const ViewerStats s = server.stats();
    const int64_t extra = rss_bytes() - rss0 - s.bytes;  // beyond the frames kept for browsers
    std::printf(
        "viewer sink, %s: %d frames (%.1f MB) in %.3f s = %.0f frames/s, slowest add "
        "%.1f ms; memory beyond the frames %.1f MB; clients %lld\n",
        stalled ? "one client stalled" : "no stalled client", frames, s.bytes / 1e6, seconds,
        frames / seconds, worst_add * 1e3, extra / 1e6, static_cast<long long>(s.clients));
    return std::make_pair(frames / seconds, extra);
  };
  const auto [fps_free, mem_free] = feed(false);
  const auto [fps_stalled, mem_stalled] = feed(true);
  // The stalled client's writes wait in the kernel; the producer never waits for them. Timing
  // on a shared machine is noisy, hence the margin; the point is no proportional slow-down.
  EXPECT_GT(fps_stalled, 0.5 * fps_free);
  // Per client the server holds a cursor and at most one message in flight (shared bytes).
  EXPECT_LT(mem_stalled, 32e6);
  (void)mem_free;
}

}  // namespace
}  // namespace lingbot
#endif  // LINGBOT_HAVE_VIEWER
