// One client's WebSocket on /v1/stream, on the network thread: reads its messages (start, then
// frames, then finish), checks their order and size, admits the stream and hands its frames to
// the session worker, and writes the worker's messages back one at a time.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "net/http.h"
#include "serve/context.h"
#include "serve/worker.h"

namespace lingbot::serve {

class StreamConnection : public std::enable_shared_from_this<StreamConnection> {
 public:
  StreamConnection(net::tcp::socket&& socket, Context& ctx);
  ~StreamConnection();  // cancels the session, if it is still running

  void start(net::Request req);  // the WebSocket handshake
  void go_away();                // the server stops: close 1001 after the message in flight
  void close();                  // drops the socket at once

 private:
  enum class State { AwaitStart, Streaming, Finishing, Closing };

  void read();
  void on_message();
  void on_text(const std::string& text);
  void on_frame(std::string bytes);
  // Ends the stream with `reason` and close `code`: the protocol was broken (not a crash).
  void fail(int code, const std::string& reason);
  void pump();  // writes the next message unless one is being written
  // The socket failed or closed (`ec`): the session ends, counted (a protocol error as an
  // error, else a disconnection) and logged, unless the server was closing it already.
  void gone(const net::beast::error_code& ec);
  void wake();  // from any thread
  void on_start_timeout();
  // The stream idle timeout: checks, and re-arms itself while the stream is not waiting for its
  // client (frames queued or being computed, a message being written).
  void arm_idle(Clock::duration after);
  void on_idle_check();
  void log(const std::string& what) const;  // one line on stderr, naming the stream and peer

  net::websocket::stream<net::beast::tcp_stream> ws_;
  // Until "start" arrives the socket holds no session, but a slot of the server's connections:
  // the websocket's own idle timeout (minutes) is too long for that. Afterwards the same timer
  // bounds how long a started stream may leave the server waiting for a frame.
  net::asio::steady_timer timer_;
  Clock::time_point waiting_since_{};  // the server has been waiting for the client since
  int64_t frames_in_ = 0;              // frame messages received
  int64_t announced_ = 0;              // frames the start message announced (0: open-ended)
  std::string peer_;                   // the client's address, for the log
  Context& ctx_;
  net::beast::flat_buffer in_;
  std::shared_ptr<SessionWorker> worker_;
  std::string id_;
  std::optional<Outgoing> final_;  // the last message, from this thread (error, refusal)
  // While reading is paused and nothing is being written no handler holds the connection: it
  // holds itself until the worker's wake-up resumes it.
  std::shared_ptr<StreamConnection> paused_;
  State state_ = State::AwaitStart;
  bool reading_ = false, writing_ = false, closed_ = false, close_queued_ = false;
};

}  // namespace lingbot::serve
