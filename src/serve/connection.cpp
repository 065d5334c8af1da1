#include "serve/connection.h"

#include <cstdio>

#include "lingbot/error.h"

namespace lingbot::serve {

using namespace net;  // beast, websocket, asio, tcp

// A message is read this much at a time, so that one larger than allowed is refused when its
// first bytes beyond the limit arrive, with a reason, rather than buffered whole.
constexpr size_t kReadChunk = 256 * 1024;

namespace {

// Errors of the WebSocket protocol itself, found by beast while reading (a bad opcode, a text
// message that is not UTF-8...): beast has closed with 1002 or 1007. Not a client that left.
bool protocol_error(const beast::error_code& ec) {
  return ec == websocket::condition::protocol_violation;
}

}  // namespace

StreamConnection::StreamConnection(tcp::socket&& socket, Context& ctx)
    : ws_(std::move(socket)),
      timer_(ws_.get_executor()),
      peer_(peer_of(beast::get_lowest_layer(ws_).socket())),
      ctx_(ctx) {
  ++ctx_.connections;
}

void StreamConnection::log(const std::string& what) const {
  std::fprintf(stderr, "serve: stream%s%s from %s: %s\n", id_.empty() ? "" : " ", id_.c_str(),
               peer_.c_str(), what.c_str());
}

StreamConnection::~StreamConnection() {
  --ctx_.connections;
  if (worker_) worker_->cancel(Outcome::Disconnected);
}

void StreamConnection::start(Request req) {
  beast::get_lowest_layer(ws_).expires_never();  // the websocket's own timeouts take over
  ws_.set_option(websocket::stream_base::timeout::suggested(beast::role_type::server));
  ws_.read_message_max(0);  // read() enforces the limits, per message type
  ws_.async_accept(req, [self = shared_from_this()](beast::error_code ec) {
    if (ec) return self->log("WebSocket handshake failed: " + ec.message());
    self->timer_.expires_after(std::chrono::seconds(self->ctx_.options.start_timeout_s));
    self->timer_.async_wait([weak = self->weak_from_this()](beast::error_code ec) {
      if (auto c = weak.lock(); c && !ec) c->on_start_timeout();
    });
    self->read();
  });
}

void StreamConnection::on_start_timeout() {
  if (state_ != State::AwaitStart || closed_) return;
  fail(1008, "no \"start\" message within " + std::to_string(ctx_.options.start_timeout_s) +
                 " s of connecting");
}

void StreamConnection::arm_idle(Clock::duration after) {
  timer_.expires_after(after);
  timer_.async_wait([weak = weak_from_this()](beast::error_code ec) {
    if (auto c = weak.lock(); c && !ec) c->on_idle_check();
  });
}

void StreamConnection::on_idle_check() {
  if (state_ != State::Streaming || closed_) return;  // finishing: the frames are all in
  const auto now = Clock::now();
  const auto limit = std::chrono::seconds(ctx_.options.stream_idle_timeout_s);
  // Not the client's turn: the session has frames to compute, or a message is on its way (a
  // client that reads slowly is paused, not idle). The wait starts again afterwards.
  if (writing_ || !worker_->waiting_for_frames()) {
    waiting_since_ = now;
    return arm_idle(limit);
  }
  if (now - waiting_since_ < limit) return arm_idle(limit - (now - waiting_since_));
  fail(1008, "no frame for " + std::to_string(ctx_.options.stream_idle_timeout_s) +
                 " s (the server's stream idle timeout); send \"finish\" to end a stream");
}

void StreamConnection::read() {
  const auto self = std::move(paused_);
  if (reading_ || closed_ || state_ == State::Closing) return;
  reading_ = true;
  ws_.async_read_some(in_, kReadChunk, [self = shared_from_this()](beast::error_code ec, size_t) {
    self->reading_ = false;
    if (ec) return self->gone(ec);
    self->on_message();
  });
}

void StreamConnection::on_message() {
  const bool text = ws_.got_text();
  const size_t limit = text ? kMaxTextBytes : ctx_.options.max_frame_bytes;
  if (in_.size() > limit)
    return fail(1009, std::string(text ? "text" : "frame") + " message larger than " +
                          std::to_string(limit) + " bytes");
  if (!ws_.is_message_done()) return read();
  std::string msg = beast::buffers_to_string(in_.data());
  in_.consume(in_.size());
  // An idle stream keeps no frame-sized buffer.
  if (in_.capacity() > 2 * kReadChunk) in_.shrink_to_fit();
  if (text)
    on_text(msg);
  else
    on_frame(std::move(msg));
  // Stop reading while the session has its fill of frames: the client then waits on TCP.
  if (state_ != State::Streaming || worker_->wants_frames())
    read();
  else
    paused_ = shared_from_this();
}

void StreamConnection::on_text(const std::string& text) {
  ClientText m;
  try {
    m = parse_client_text(text, ctx_.options.stream);
  } catch (const Error& e) {
    return fail(1008, e.what());
  }
  if (state_ == State::Finishing) return fail(1008, "message after \"finish\"");
  if (m.type == ClientText::Type::Finish) {
    if (state_ == State::AwaitStart) return fail(1008, "\"finish\" before \"start\"");
    state_ = State::Finishing;
    worker_->finish();
    return;
  }
  if (state_ != State::AwaitStart) return fail(1008, "a second \"start\"");
  timer_.cancel();
  Context::Opened o;
  try {
    o = ctx_.open(m.start, [self = weak_from_this(), ex = ws_.get_executor()] {
      asio::post(ex, [self] {
        if (auto c = self.lock()) c->wake();
      });
    });
  } catch (const Error& e) {  // the preflight cannot plan it
    return fail(1008, e.what());
  }
  if (!o.worker) {
    state_ = State::Closing;
    log("refused: " + o.refused);
    final_ = Outgoing{.data = refused_json(o.refused, o.need, o.free), .close_code = 1013};
    return pump();
  }
  worker_ = o.worker;
  id_ = o.id;
  announced_ = m.start.frames;
  state_ = State::Streaming;
  waiting_since_ = Clock::now();
  arm_idle(std::chrono::seconds(ctx_.options.stream_idle_timeout_s));
  // Sent before any result: the worker's messages wait until this one is on its way.
  final_ = Outgoing{.data = ready_json(o.id, o.device, m.start, o.need)};
  pump();
}

void StreamConnection::on_frame(std::string bytes) {
  if (state_ == State::AwaitStart) return fail(1008, "a frame before \"start\"");
  if (state_ == State::Finishing) return fail(1008, "a frame after \"finish\"");
  // The admission reserved memory for the frames announced; more would outgrow it.
  if (announced_ > 0 && frames_in_ >= announced_)
    return fail(1008, "a frame beyond the " + std::to_string(announced_) +
                          " frames announced in \"start\" (the memory reserved is for those)");
  ++frames_in_;
  waiting_since_ = Clock::now();
  worker_->push(std::move(bytes), waiting_since_);
}

void StreamConnection::fail(int code, const std::string& reason) {
  if (state_ == State::Closing) return;
  if (worker_)
    worker_->cancel(Outcome::Error);
  else
    ctx_.metrics.ended("", Outcome::Error);
  state_ = State::Closing;
  log("closed (" + std::to_string(code) + "): " + reason);
  final_ = Outgoing{.data = error_json(reason), .close_code = code};
  pump();
}

void StreamConnection::go_away() {
  if (closed_) return;
  if (worker_) worker_->cancel(Outcome::Disconnected);
  if (state_ == State::Closing) return;
  state_ = State::Closing;
  final_ = Outgoing{.close_code = 1001};  // no message, only the close
  pump();
}

void StreamConnection::close() {
  closed_ = true;
  paused_.reset();
  beast::error_code ignored;
  beast::get_lowest_layer(ws_).socket().close(ignored);
}

void StreamConnection::wake() {
  pump();
  if (state_ == State::Streaming && worker_->wants_frames()) read();
}

void StreamConnection::pump() {
  if (writing_ || closed_ || close_queued_) return;
  std::optional<Outgoing> m;
  if (final_) {
    m = std::move(final_);
    final_.reset();
  } else if (worker_) {  // a cancelled worker has none
    m = worker_->pop();
  }
  if (!m) return;
  if (m->close_code) {
    close_queued_ = true;
    state_ = State::Closing;
    if (!m->reason.empty()) log("closed (" + std::to_string(m->close_code) + "): " + m->reason);
  }
  const auto msg = std::make_shared<Outgoing>(std::move(*m));
  const auto on_sent = [self = shared_from_this(), msg](beast::error_code ec) {
    self->writing_ = false;
    if (ec) return self->gone(ec);
    self->waiting_since_ = Clock::now();  // the client's turn from here
    if (msg->result) self->ctx_.metrics.result_sent(self->id_, Clock::now() - msg->received);
    if (!msg->close_code) return self->pump();
    const auto code = static_cast<websocket::close_code>(msg->close_code);
    self->writing_ = true;
    self->ws_.async_close(code, [self](beast::error_code) {
      self->writing_ = false;
      self->closed_ = true;
      self->paused_.reset();
    });
  };
  writing_ = true;
  if (msg->data.empty() && msg->close_code && !msg->binary) {
    on_sent({});  // a close alone
    return;
  }
  ws_.binary(msg->binary);
  ws_.async_write(asio::buffer(msg->data),
                  [on_sent](beast::error_code ec, size_t) { on_sent(ec); });
}

void StreamConnection::gone(const beast::error_code& ec) {
  if (closed_) return;
  closed_ = true;
  paused_.reset();
  timer_.cancel();
  // The server's own close (an error, a refusal, the end, the server stopping) was counted and
  // logged where it was decided; the socket's end after it is no news.
  if (state_ == State::Closing) return;
  const bool broken = protocol_error(ec);
  const Outcome o = broken ? Outcome::Error : Outcome::Disconnected;
  if (worker_)
    worker_->cancel(o);
  else
    ctx_.metrics.ended("", o);
  if (broken)
    log("closed for a WebSocket protocol error: " + ec.message());
  else if (ec == websocket::error::closed)
    log("the client closed the stream (" + std::to_string(ws_.reason().code) +
        (state_ == State::AwaitStart ? ") before \"start\"" : ") mid-stream"));
  else
    log(std::string("connection lost") +
        (state_ == State::AwaitStart ? " before \"start\"" : " mid-stream") + ": " + ec.message());
}

}  // namespace lingbot::serve
