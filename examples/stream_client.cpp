// Streams a folder of images, a video file, a camera or a stream URL to `lingbot-map serve` and
// prints each frame's camera position as it comes back: lingbot's public API reads the frames,
// Boost.Beast carries them (wire protocol: docs/SERVE.md).
//
//   stream_client INPUT [HOST [PORT [PREPROCESS]]]    token, if the server has one:
//                                                    LINGBOT_SERVE_TOKEN
//
// Frames are sent as decoded RGB ("LBR1" messages); the server preprocesses them (PREPROCESS:
// crop, the default, pad or none, with sides that are multiples of 14). Sending and
// reading run as two coroutines on one thread: the server reads only a few frames ahead of its
// model and pauses when its results are not read, so a client that only sent, or only read,
// could wait on the server while the server waits on it.
// clang-format off
#include <utility>  // first: Boost 1.74's asio/awaitable.hpp uses std::exchange without it
// clang-format on
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/websocket.hpp>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "lingbot/error.h"
#include "lingbot/source.h"

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace websocket = beast::websocket;
using Socket = websocket::stream<beast::tcp_stream>;
using asio::awaitable;
using asio::use_awaitable;
using nlohmann::json;

namespace {

// "LBR1", then height, width and channels as uint32 little-endian, then the HWC bytes.
std::vector<uint8_t> raw_message(const lingbot::Tensor& hwc) {
  std::vector<uint8_t> msg(16 + hwc.nbytes());
  const uint32_t header[3] = {uint32_t(hwc.dim(0)), uint32_t(hwc.dim(1)), 3};
  std::memcpy(msg.data(), "LBR1", 4);
  for (int i = 0; i < 3; ++i)  // little-endian whatever the host's order
    for (int b = 0; b < 4; ++b) msg[4 + 4 * i + b] = uint8_t(header[i] >> (8 * b));
  std::memcpy(msg.data() + 16, hwc.raw(), hwc.nbytes());
  return msg;
}

// The server's "error" or "refused" message (or anything unexpected) as one line.
std::runtime_error server_error(const json& msg) {
  const std::string type = msg.value("type", "");
  if (type == "refused")
    return std::runtime_error("refused: " + msg.value("reason", "") + " (needs " +
                              std::to_string(msg.value("need_bytes", int64_t{0})) + " bytes, " +
                              std::to_string(msg.value("free_bytes", int64_t{0})) + " free)");
  if (type == "error") return std::runtime_error("server error: " + msg.value("reason", ""));
  return std::runtime_error("unexpected message: " + msg.dump());
}

awaitable<json> read_json(Socket& ws) {
  beast::flat_buffer buffer;
  co_await ws.async_read(buffer, use_awaitable);
  if (!ws.got_text()) throw std::runtime_error("a binary message where text was expected");
  co_return json::parse(beast::buffers_to_string(buffer.data()));
}

// Owns a share of the socket: it may still be writing when the reader has failed.
awaitable<void> send_frames(std::shared_ptr<Socket> ws, lingbot::FrameSource& source) {
  for (int64_t i = 0;; ++i) {
    // Decoding holds this thread; results meanwhile wait in the socket's receive buffer.
    std::optional<lingbot::Tensor> frame = source.get(i);
    if (!frame) break;
    const std::vector<uint8_t> msg = raw_message(*frame);
    ws->binary(true);
    co_await ws->async_write(asio::buffer(msg), use_awaitable);
  }
  ws->text(true);
  co_await ws->async_write(asio::buffer(std::string(R"({"type":"finish"})")), use_awaitable);
}

awaitable<void> read_results(Socket& ws) {
  for (int64_t expected = 0;; ++expected) {
    const json msg = co_await read_json(ws);
    const std::string type = msg.value("type", "");
    if (type == "finished") {
      std::fprintf(stderr, "%lld frames\n", static_cast<long long>(msg.value("frames", 0)));
      co_return;
    }
    if (type != "result") throw server_error(msg);
    if (msg.at("index").get<int64_t>() != expected)
      throw std::runtime_error("result " + msg.at("index").dump() + " out of order");
    const auto& c2w = msg.at("c2w");  // 3x4 row-major: the position is the last column
    std::printf("%6lld %c  t = (% .4f, % .4f, % .4f)\n", static_cast<long long>(expected),
                msg.at("keyframe").get<bool>() ? 'K' : ' ', c2w[3].get<double>(),
                c2w[7].get<double>(), c2w[11].get<double>());
  }
}

awaitable<void> stream(std::string host, std::string port, std::string preprocess,
                       lingbot::FrameSource& source) {
  auto executor = co_await asio::this_coro::executor;
  auto socket = std::make_shared<Socket>(executor);
  Socket& ws = *socket;
  auto& tcp = beast::get_lowest_layer(ws);
  tcp.expires_after(std::chrono::seconds(15));  // connecting and the handshake
  const auto endpoints =
      co_await asio::ip::tcp::resolver(executor).async_resolve(host, port, use_awaitable);
  co_await tcp.async_connect(endpoints, use_awaitable);
  tcp.expires_never();  // the websocket's own timeouts from here on
  // A server that sends nothing for 5 minutes, not even a pong, has failed. (It answers pings
  // only while it reads, and stops reading while its model works through the frames it has;
  // on a CPU the first results can take a minute.)
  ws.set_option(
      websocket::stream_base::timeout{std::chrono::seconds(15), std::chrono::seconds(300), true});
  ws.set_option(websocket::stream_base::decorator([](websocket::request_type& req) {
    if (const char* token = std::getenv("LINGBOT_SERVE_TOKEN"))
      req.set(beast::http::field::authorization, std::string("Bearer ") + token);
  }));
  co_await ws.async_handshake(host + ":" + port, "/v1/stream", use_awaitable);

  const std::optional<lingbot::Tensor> first = source.get(0);
  if (!first) throw std::runtime_error("no frames");
  const json start = {{"type", "start"},
                      {"width", first->dim(1)},
                      {"height", first->dim(0)},
                      {"frames", source.count()},
                      {"preprocess", preprocess}};
  co_await ws.async_write(asio::buffer(start.dump()), use_awaitable);
  const json ready = co_await read_json(ws);
  if (ready.value("type", "") != "ready") throw server_error(ready);
  std::fprintf(stderr, "session %s on %s\n", ready.value("session", "").c_str(),
               ready.value("device", "").c_str());

  // The sender runs beside the reader; an error on either side closes the socket, which ends
  // the other (the first error is the one reported).
  auto send_error = std::make_shared<std::exception_ptr>();
  asio::co_spawn(executor, send_frames(socket, source), [socket, send_error](std::exception_ptr e) {
    if (!e) return;
    *send_error = e;
    beast::get_lowest_layer(*socket).close();
  });
  try {
    co_await read_results(ws);
  } catch (...) {
    tcp.close();
    if (*send_error) std::rethrow_exception(*send_error);
    throw;
  }
  beast::error_code ignored;  // the server closes after "finished"; answer if it has not
  co_await ws.async_close(websocket::close_code::normal,
                          asio::redirect_error(use_awaitable, ignored));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || argc > 5) {
    std::fprintf(stderr,
                 "usage: %s INPUT [HOST [PORT [crop|pad|none]]]   (INPUT: a folder, video, "
                 "camera or URL)\n",
                 argv[0]);
    return 2;
  }
  try {
    // The pictures as decoded, uint8 [H, W, 3]: the server does the model's preprocessing.
    auto source = lingbot::open_source(argv[1], {.fps = 10}, [](const lingbot::ImageU8& img) {
      auto rgb = std::make_shared<std::vector<uint8_t>>(img.rgb);
      return lingbot::Tensor::wrap(rgb->data(), {img.height, img.width, 3}, lingbot::DType::U8,
                                   rgb);
    });
    asio::io_context io;
    std::exception_ptr error;
    asio::co_spawn(io,
                   stream(argc > 2 ? argv[2] : "127.0.0.1", argc > 3 ? argv[3] : "8090",
                          argc > 4 ? argv[4] : "crop", *source),
                   [&](std::exception_ptr e) { error = e; });
    io.run();
    if (error) std::rethrow_exception(error);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "stream_client: %s\n", e.what());
    return 1;
  }
}
