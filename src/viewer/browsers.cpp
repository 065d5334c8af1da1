#include "viewer/browsers.h"

#include <cstdio>
#include <string>

#include "lingbot/error.h"
#include "viewer/control.h"

namespace lingbot::viewer {

using namespace net;  // beast, http, websocket, asio, tcp

namespace {

constexpr size_t kMaxReplies = 8;  // pongs waiting; more pings than this are not answered
// Kernel send buffer per browser: bounds what a stalled one pins in the kernel, and lets the
// back-pressure (and so the skipping of stale images) start after a fraction of a second.
constexpr int kSendBuffer = 256 * 1024;

}  // namespace

class WsSession : public std::enable_shared_from_this<WsSession> {
 public:
  WsSession(tcp::socket&& socket, Scene& scene, Hub& hub, Hub::Slot slot,
            std::shared_ptr<const void> owner)
      : ws_(std::move(socket)),
        scene_(scene),
        hub_(hub),
        owner_(std::move(owner)),
        slot_(std::move(slot)) {}

  void start(Request req) {
    beast::get_lowest_layer(ws_).expires_never();  // the websocket's own timeouts take over
    beast::error_code ignored;
    beast::get_lowest_layer(ws_).socket().set_option(
        asio::socket_base::send_buffer_size(kSendBuffer), ignored);
    ws_.set_option(websocket::stream_base::timeout::suggested(beast::role_type::server));
    ws_.read_message_max(kMaxControlBytes);
    ws_.async_accept(req, [self = shared_from_this()](beast::error_code ec) {
      if (ec) return;
      self->hub_.add(self);
      self->read();
      self->pump();
    });
  }

  // Sends the next message unless one is being sent: one write at a time, chosen when the last
  // completes, so a browser that stops reading just stops advancing its cursor.
  void pump() {
    if (writing_ || closed_) return;
    Message m;
    if (!replies_.empty()) {
      m = std::move(replies_.front());
      replies_.pop_front();
    } else {
      m = scene_.next(cursor_);
    }
    if (!m) return;
    writing_ = true;
    ws_.text(m.text);
    // The message's bytes are shared and immutable; the handler keeps them alive.
    ws_.async_write(asio::buffer(*m.data),
                    [self = shared_from_this(), m](beast::error_code ec, size_t) {
                      self->writing_ = false;
                      if (ec) {
                        self->closed_ = true;
                        return;
                      }
                      self->pump();
                    });
  }

  void close() {
    closed_ = true;
    beast::error_code ignored;
    beast::get_lowest_layer(ws_).socket().close(ignored);
  }

 private:
  void read() {
    ws_.async_read(in_, [self = shared_from_this()](beast::error_code ec, size_t) {
      if (ec) {  // closed, timed out, or longer than kMaxControlBytes (beast closes it)
        if (ec == websocket::error::message_too_big) self->reject("message too long");
        self->closed_ = true;
        return;
      }
      self->on_message();
    });
  }

  void on_message() {
    const std::string text = beast::buffers_to_string(in_.data());
    in_.consume(in_.size());
    Control c;
    try {
      c = parse_control(text);
    } catch (const Error& e) {
      reject(e.what());
      closed_ = true;  // no more writes; the close frame goes after the one in flight
      ws_.async_close(websocket::close_reason(websocket::close_code::policy_error, "bad message"),
                      [self = shared_from_this()](beast::error_code) {});
      return;
    }
    if (c.op == Control::Op::Ping) {
      if (replies_.size() < kMaxReplies)
        replies_.push_back({std::make_shared<const std::string>(
                                "{\"type\":\"pong\",\"id\":" + std::to_string(c.id) + "}"),
                            true});
    } else {
      cursor_.images = c.on;
    }
    pump();
    read();
  }

  void reject(const char* why) {
    ++hub_.bad_messages;
    std::fprintf(stderr, "viewer: closing a connection: %s\n", why);
  }

  websocket::stream<beast::tcp_stream> ws_;
  Scene& scene_;
  Hub& hub_;
  std::shared_ptr<const void> owner_;  // keeps scene_ and hub_ alive, where needed
  Hub::Slot slot_;                     // given back when this session is destroyed
  Scene::Cursor cursor_;
  beast::flat_buffer in_;
  std::deque<Message> replies_;
  bool writing_ = false, closed_ = false;
};

Hub::Slot Hub::take_slot(int64_t max) {
  int64_t n = *slots_;
  do {
    if (n >= max) return nullptr;
  } while (!slots_->compare_exchange_weak(n, n + 1));
  // The deleter holds the counter, not the hub.
  return Slot(reinterpret_cast<void*>(1), [slots = slots_](void*) { --*slots; });
}

void Hub::accept(tcp::socket&& socket, Request req, Scene& scene, Slot slot,
                 std::shared_ptr<const void> owner) {
  std::make_shared<WsSession>(std::move(socket), scene, *this, std::move(slot), std::move(owner))
      ->start(std::move(req));
}

void Hub::wake(std::shared_ptr<const void> owner) {
  if (!wake_pending_.exchange(true))
    asio::post(ex_, [this, owner = std::move(owner)] {
      wake_pending_ = false;
      pump_all();
    });
}

void Hub::add(const std::shared_ptr<WsSession>& s) {
  sessions_.push_back(s);
  pump_all();  // also drops the sessions that have ended
}

void Hub::pump_all() {
  std::erase_if(sessions_, [](const std::weak_ptr<WsSession>& w) { return w.expired(); });
  for (auto& w : sessions_)
    if (auto s = w.lock()) s->pump();
}

void Hub::close_all() {
  for (auto& w : sessions_)
    if (auto s = w.lock()) s->close();
  sessions_.clear();  // each slot goes with its session, once its handlers have run
}

}  // namespace lingbot::viewer
