#include "net/http.h"

#include <algorithm>
#include <chrono>

#include "lingbot/error.h"

namespace lingbot::net {

constexpr auto kHttpTimeout = std::chrono::seconds(30);

// Other web pages the user has open must not reach our servers: a page served by another site
// can open a WebSocket to 127.0.0.1 (browsers send its Origin, which then differs from the
// Host), or reach it through a name it controls that resolves to 127.0.0.1 (DNS rebinding: the
// Host is then that name). So on a loopback address the Host must be an address or localhost
// (served to other machines, they may know it by name), and an Origin must always be the Host.
bool trusted(const Request& req, bool loopback) {
  const std::string host(req[http::field::host]);
  const std::string origin(req[http::field::origin]);
  if (!origin.empty() && origin != "http://" + host && origin != "https://" + host) return false;
  if (!loopback) return true;
  std::string name = host;
  if (name.starts_with('[')) {
    name = name.substr(1, name.find(']') - 1);
  } else if (std::count(name.begin(), name.end(), ':') == 1) {
    name = name.substr(0, name.find(':'));
  }
  beast::error_code ec;
  asio::ip::make_address(name, ec);
  return !ec || name == "localhost";
}

std::string_view path_of(const Request& req) {
  const std::string_view target(req.target().data(), req.target().size());
  return target.substr(0, target.find('?'));
}

std::string query_param(const Request& req, std::string_view name) {
  const std::string_view target(req.target().data(), req.target().size());
  const size_t q = target.find('?');
  if (q == std::string_view::npos) return {};
  std::string_view rest = target.substr(q + 1);
  while (!rest.empty()) {
    const std::string_view pair = rest.substr(0, rest.find('&'));
    rest.remove_prefix(std::min(rest.size(), pair.size() + 1));
    if (pair.starts_with(name) && pair.size() > name.size() && pair[name.size()] == '=')
      return std::string(pair.substr(name.size() + 1));
  }
  return {};
}

std::string peer_of(const tcp::socket& socket) {
  beast::error_code ec;
  const tcp::endpoint e = socket.remote_endpoint(ec);
  if (ec) return "an unknown peer";
  const std::string a = e.address().to_string();
  return (e.address().is_v6() ? "[" + a + "]" : a) + ":" + std::to_string(e.port());
}

HttpSession::HttpSession(tcp::socket&& socket, Handler handler, bool loopback)
    : stream_(std::move(socket)), handler_(std::move(handler)), loopback_(loopback) {}

void HttpSession::read() {
  parser_.emplace();
  parser_->header_limit(kMaxRequestHeader);
  parser_->body_limit(0);
  stream_.expires_after(kHttpTimeout);
  http::async_read(stream_, buffer_, *parser_,
                   [self = shared_from_this()](beast::error_code ec, size_t) {
                     if (ec) return self->shutdown();
                     self->on_request(self->parser_->release());
                   });
}

void HttpSession::on_request(Request req) {
  if (!trusted(req, loopback_))
    return respond(req, http::status::forbidden, "text/plain", "unknown Host or Origin\n");
  if (!websocket::is_upgrade(req) && req.method() != http::verb::get &&
      req.method() != http::verb::head)
    return respond(req, http::status::method_not_allowed, "text/plain", "GET only\n");
  handler_(shared_from_this(), std::move(req));
}

void HttpSession::respond(const Request& req, http::status status, std::string_view type,
                          std::string_view body, bool keep_alive) {
  auto res = std::make_shared<http::response<http::string_body>>(status, req.version());
  res->set(http::field::server, "lingbot-map");
  res->set(http::field::content_type, beast::string_view(type.data(), type.size()));
  res->set(http::field::cache_control, "no-store");
  res->set("X-Content-Type-Options", "nosniff");
  res->keep_alive(keep_alive && req.keep_alive());
  if (req.method() != http::verb::head) res->body().assign(body.data(), body.size());
  res->content_length(body.size());
  http::async_write(stream_, *res, [self = shared_from_this(), res](beast::error_code ec, size_t) {
    if (ec || !res->keep_alive()) return self->shutdown();
    self->read();
  });
}

void HttpSession::shutdown() {
  beast::error_code ignored;
  stream_.socket().shutdown(tcp::socket::shutdown_send, ignored);
}

void Listener::listen(const std::string& host, int port, const std::string& what,
                      const std::string& host_flag) {
  const std::string where = host + ":" + std::to_string(port);
  beast::error_code ec;
  const auto address = asio::ip::make_address(host, ec);
  if (ec)
    throw Error(what + ": " + host_flag + " must be an IP address, got '" + host + "'",
                ErrorKind::InvalidArgument);
  const tcp::endpoint endpoint(address, static_cast<unsigned short>(port));
  acceptor_.open(endpoint.protocol(), ec);
  if (!ec) acceptor_.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) acceptor_.bind(endpoint, ec);
  if (!ec) acceptor_.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) {
    // Closing resets ec, so the reason is taken first.
    const std::string reason = ec.message();
    acceptor_.close(ec);
    throw Error(what + ": cannot listen on " + where + ": " + reason + " (another --port?)");
  }
  port_ = acceptor_.local_endpoint().port();
  loopback_ = address.is_loopback();
  accept();
}

void Listener::accept() {
  acceptor_.async_accept([this](beast::error_code ec, tcp::socket socket) {
    if (ec) return;  // closed
    std::make_shared<HttpSession>(std::move(socket), handler_, loopback_)->read();
    accept();
  });
}

void Listener::close() {
  beast::error_code ignored;
  acceptor_.close(ignored);
}

std::string url(const std::string& host, int port) {
  const bool v6 = host.find(':') != std::string::npos;
  return "http://" + (v6 ? "[" + host + "]" : host) + ":" + std::to_string(port) + "/";
}

}  // namespace lingbot::net
