// The HTTP side shared by the browser viewer and the stream server, with Boost.Beast on one
// io_context thread: a listener, the check that a request comes from a page we trust, one HTTP
// connection with a bounded header and no body, and a helper to answer it. What a server serves
// is its Handler, which answers each request or takes the socket for a WebSocket.
#pragma once

// Boost 1.74's asio uses std::exchange without including <utility> (C++20 coroutine support).
#include <utility>
// clang-format off
#include <boost/asio.hpp>
#include <boost/beast.hpp>
// clang-format on
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

namespace lingbot::net {

namespace beast = boost::beast;
namespace http = beast::http;
namespace websocket = beast::websocket;
namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using Request = http::request<http::empty_body>;

inline constexpr size_t kMaxRequestHeader = 8192;

// Whether the request may come from another web page the user has open (see the .cpp).
bool trusted(const Request& req, bool loopback);

// The request's path without the query, and one query parameter ("" when absent).
std::string_view path_of(const Request& req);
std::string query_param(const Request& req, std::string_view name);

// The socket's peer as "ADDRESS:PORT" (an IPv6 address in brackets), for log lines.
std::string peer_of(const tcp::socket& socket);

class HttpSession;
// Called on the io thread for each trusted request: answers through the session, or takes its
// socket (release_socket) for a WebSocket.
using Handler = std::function<void(const std::shared_ptr<HttpSession>&, Request&&)>;

// One HTTP connection: reads requests (header at most kMaxRequestHeader, no body) one after
// the other, each answered before the next is read.
class HttpSession : public std::enable_shared_from_this<HttpSession> {
 public:
  HttpSession(tcp::socket&& socket, Handler handler, bool loopback);
  void read();
  // `keep_alive` false closes the connection after the answer (e.g. a refused token).
  void respond(const Request& req, http::status status, std::string_view type,
               std::string_view body, bool keep_alive = true);
  tcp::socket release_socket() { return stream_.release_socket(); }
  std::string peer() const { return peer_of(stream_.socket()); }

 private:
  void on_request(Request req);
  void shutdown();

  beast::tcp_stream stream_;
  Handler handler_;
  bool loopback_;
  beast::flat_buffer buffer_{kMaxRequestHeader};
  std::optional<http::request_parser<http::empty_body>> parser_;
};

// Listens on one address and hands every connection to an HttpSession.
class Listener {
 public:
  Listener(asio::io_context& ioc, Handler handler) : acceptor_(ioc), handler_(std::move(handler)) {}
  // Binds and starts accepting; throws Error (naming `what`, e.g. "viewer", and the option that
  // gave the host) when the address cannot be used: not an IP address, a port in use.
  void listen(const std::string& host, int port, const std::string& what,
              const std::string& host_flag);
  int port() const { return port_; }
  bool loopback() const { return loopback_; }  // on 127.0.0.1 or ::1 (see trusted)
  void close();                                // on the io thread

 private:
  void accept();

  tcp::acceptor acceptor_;
  Handler handler_;
  int port_ = 0;
  bool loopback_ = true;
};

// http://HOST:PORT/ (an IPv6 host in brackets).
std::string url(const std::string& host, int port);

}  // namespace lingbot::net
