// A test client of the stream server over loopback: HTTP GETs, and streams (start, frames,
// finish) whose messages are all read back. Everything runs asynchronously on the client's own
// io_context, so a client sends its frames while it reads results, as a real one would.
#pragma once

#include <utility>
// clang-format off
#include <boost/asio.hpp>
#include <boost/beast.hpp>
// clang-format on
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "lingbot/engine.h"

namespace lingbot::test::serve {

namespace beast = boost::beast;
namespace http = beast::http;
namespace websocket = beast::websocket;
namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using nlohmann::json;

struct HttpReply {
  int status = 0;
  std::string body;
};

inline HttpReply get(int port, const std::string& target, const std::string& bearer = "") {
  asio::io_context ioc;
  tcp::socket s(ioc);
  s.connect({asio::ip::make_address("127.0.0.1"), static_cast<unsigned short>(port)});
  http::request<http::empty_body> req(http::verb::get, target, 11);
  req.set(http::field::host, "127.0.0.1:" + std::to_string(port));
  if (!bearer.empty()) req.set(http::field::authorization, "Bearer " + bearer);
  http::write(s, req);
  beast::flat_buffer b;
  http::response<http::string_body> res;
  http::read(s, b, res);
  return {static_cast<int>(res.result_int()), res.body()};
}

// What a stream got back.
struct Stream {
  bool handshake = false;   // the WebSocket was accepted
  std::vector<json> texts;  // every text message, in order
  std::vector<std::string> binaries;
  int close_code = -1;                       // the server's close code (-1: none seen)
  std::string error;                         // the connection's failure, if any
  std::vector<FrameResult> results() const;  // results with their maps, when asked
  // For failure messages: the error and the text messages.
  std::string describe() const {
    std::string d = error.empty() ? "" : "(" + error + ") ";
    for (const json& t : texts) d += t.dump().substr(0, 200) + " ";
    return d + "close " + std::to_string(close_code);
  }
  const json* find(const std::string& type) const {
    for (const json& t : texts)
      if (t.value("type", "") == type) return &t;
    return nullptr;
  }
};

// A client's script: messages sent in order (the first after the handshake; each after the
// previous one is written), then reading until the server closes. `drop_after`: close the TCP
// socket without a WebSocket close once this many messages were sent and the first reply came.
struct Script {
  std::string target = "/v1/stream";
  std::vector<std::pair<bool, std::string>> messages;  // (binary, bytes)
  int drop_after = -1;
  int pause_before_last_ms = 0;  // waits this long before sending the last message
  void text(const std::string& t) { messages.push_back({false, t}); }
  void binary(const std::string& b) { messages.push_back({true, b}); }
};

class StreamClient {
 public:
  StreamClient(int port, Script script) : port_(port), script_(std::move(script)) {}

  // From any thread: close the TCP socket without a WebSocket close, as a killed process.
  void drop() {
    asio::post(ioc_, [this] {
      dropped_ = true;
      beast::error_code ignored;
      ws_.next_layer().close(ignored);
    });
  }

  Stream run() {
    ws_.next_layer().connect(
        {asio::ip::make_address("127.0.0.1"), static_cast<unsigned short>(port_)});
    beast::error_code ec;
    ws_.handshake("127.0.0.1:" + std::to_string(port_), script_.target, ec);
    if (ec) {
      out_.error = ec.message();
      return out_;
    }
    out_.handshake = true;
    ws_.read_message_max(0);
    write_next();
    read_next();
    ioc_.run();
    return out_;
  }

 private:
  void write_next() {
    if (dropped_ || sent_ == script_.messages.size()) return;
    if (script_.drop_after >= 0 && int(sent_) == script_.drop_after) return;
    if (script_.pause_before_last_ms > 0 && sent_ + 1 == script_.messages.size() && !paused_) {
      paused_ = true;
      pause_.expires_after(std::chrono::milliseconds(script_.pause_before_last_ms));
      pause_.async_wait([this](beast::error_code) { write_next(); });
      return;
    }
    const auto& [binary, bytes] = script_.messages[sent_++];
    ws_.binary(binary);
    ws_.async_write(asio::buffer(bytes), [this](beast::error_code ec, size_t) {
      if (!ec) write_next();
    });
  }

  void read_next() {
    ws_.async_read(buf_, [this](beast::error_code ec, size_t) {
      if (ec) {
        if (ec == websocket::error::closed)
          out_.close_code = ws_.reason().code;
        else
          out_.error = ec.message();
        return;
      }
      const std::string s = beast::buffers_to_string(buf_.data());
      buf_.consume(buf_.size());
      if (ws_.got_text())
        out_.texts.push_back(json::parse(s));
      else
        out_.binaries.push_back(s);
      if (script_.drop_after >= 0 && int(sent_) == script_.drop_after && !dropped_) {
        dropped_ = true;  // gone without a word, as a killed process
        beast::error_code ignored;
        ws_.next_layer().close(ignored);
        return;
      }
      read_next();
    });
  }

  asio::io_context ioc_;
  websocket::stream<tcp::socket> ws_{ioc_};
  asio::steady_timer pause_{ioc_};
  bool paused_ = false;
  beast::flat_buffer buf_;
  int port_;
  Script script_;
  size_t sent_ = 0;
  bool dropped_ = false;
  Stream out_;
};

inline Stream stream(int port, Script script) {
  return StreamClient(port, std::move(script)).run();
}

inline std::vector<FrameResult> Stream::results() const {
  std::vector<FrameResult> out;
  size_t maps = 0;
  for (const json& t : texts) {
    if (t.value("type", "") != "result") continue;
    FrameResult r;
    r.index = t.at("index");
    r.keyframe = t.at("keyframe");
    r.scale_frame = t.at("scale_frame");
    // JSON has no infinity: a non-finite number comes as null.
    const auto floats = [&](const char* key, auto& out) {
      const json& a = t.at(key);
      EXPECT_EQ(a.size(), out.size()) << key;
      for (size_t i = 0; i < out.size() && i < a.size(); ++i)
        out[i] = a[i].is_null() ? NAN : a[i].get<float>();
    };
    floats("pose_enc", r.pose_enc);
    floats("c2w", r.c2w);
    floats("w2c", r.w2c);
    floats("intrinsics", r.intrinsics);
    r.height = t.at("height");
    r.width = t.at("width");
    if (maps < binaries.size()) {
      const std::string& b = binaries[maps++];
      const size_t plane = size_t(r.height) * r.width;
      if (b.size() == 2 * plane * sizeof(float)) {
        r.depth.resize(plane);
        r.confidence.resize(plane);
        std::memcpy(r.depth.data(), b.data(), plane * sizeof(float));
        std::memcpy(r.confidence.data(), b.data() + plane * sizeof(float), plane * sizeof(float));
      }
    }
    out.push_back(std::move(r));
  }
  return out;
}

}  // namespace lingbot::test::serve
