#include "common/metrics/metrics_http.h"

#include <arpa/inet.h>
#include <civetweb.h>

#include <cstring>
#include <mutex>
#include <string>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace dcp {
namespace {

constexpr absl::string_view kMetricsPath = "/metrics";

/// Splits "HOST:PORT" into its parts; INVALID_ARGUMENT naming what is wrong.
absl::Status ParseListenAddress(absl::string_view address, std::string* host,
                                int* port) {
  const size_t colon = address.rfind(':');
  if (colon == absl::string_view::npos) {
    return absl::InvalidArgumentError(absl::StrCat(
        "metrics listen address '", address, "' is not HOST:PORT"));
  }
  const absl::string_view h = address.substr(0, colon);
  const absl::string_view p = address.substr(colon + 1);
  if (absl::StartsWith(h, "[")) {
    return absl::InvalidArgumentError(absl::StrCat(
        "metrics listen address '", address,
        "': IPv6 is not supported (the system civetweb is built without it); "
        "use an IPv4 address such as 0.0.0.0 or 127.0.0.1"));
  }
  in_addr ipv4;
  if (h != "localhost" &&
      inet_pton(AF_INET, std::string(h).c_str(), &ipv4) != 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "metrics listen address '", address, "': host '", h,
        "' is not an IPv4 address (e.g. 0.0.0.0, 127.0.0.1) or localhost"));
  }
  if (!absl::SimpleAtoi(p, port) || *port < 0 || *port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("metrics listen address '", address, "': port '", p,
                     "' is not a number in [0, 65535]"));
  }
  *host = std::string(h);
  return absl::OkStatus();
}

/// Sends a complete response with a plain-text body (none for HEAD).
int Respond(mg_connection* connection, int code, absl::string_view content_type,
            absl::string_view body, bool head, absl::string_view allow = "") {
  mg_response_header_start(connection, code);
  mg_response_header_add(connection, "Content-Type", content_type.data(),
                         static_cast<int>(content_type.size()));
  const std::string length = absl::StrCat(body.size());
  mg_response_header_add(connection, "Content-Length", length.c_str(), -1);
  if (!allow.empty()) {
    mg_response_header_add(connection, "Allow", allow.data(),
                           static_cast<int>(allow.size()));
  }
  mg_response_header_send(connection);
  if (!head && !body.empty()) mg_write(connection, body.data(), body.size());
  return code;
}

/// civetweb's request handler; `cbdata` is the registry.
int HandleRequest(mg_connection* connection, void* cbdata) {
  auto* registry = static_cast<MetricsRegistry*>(cbdata);
  const mg_request_info* request = mg_get_request_info(connection);
  const absl::string_view path =
      request->local_uri != nullptr ? request->local_uri : "";
  const absl::string_view method =
      request->request_method != nullptr ? request->request_method : "";
  constexpr absl::string_view kText = "text/plain; charset=utf-8";
  if (path != kMetricsPath) {
    return Respond(connection, 404, kText,
                   "Not found: metrics are at /metrics\n", method == "HEAD");
  }
  if (method != "GET" && method != "HEAD") {
    return Respond(connection, 405, kText, "Method not allowed\n",
                   /*head=*/false, "GET, HEAD");
  }
  const std::string body = registry->RenderText();
  return Respond(connection, 200, kMetricsTextContentType, body,
                 method == "HEAD");
}

}  // namespace

absl::StatusOr<std::unique_ptr<MetricsHttpServer>> MetricsHttpServer::Start(
    Options options) {
  if (options.registry == nullptr) {
    return absl::InvalidArgumentError("metrics HTTP server needs a registry");
  }
  if (options.threads < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "metrics HTTP server threads must be >= 1, not ", options.threads));
  }
  std::string host;
  int requested_port = 0;
  if (auto s =
          ParseListenAddress(options.listen_address, &host, &requested_port);
      !s.ok()) {
    return s;
  }

  static std::once_flag init_once;
  std::call_once(init_once, [] { mg_init_library(0); });

  std::unique_ptr<MetricsHttpServer> server(
      new MetricsHttpServer(std::move(options), std::move(host)));
  const std::string ports = absl::StrCat(server->host_, ":", requested_port);
  const std::string threads = absl::StrCat(server->options_.threads);
  const char* config[] = {
      "listening_ports",    ports.c_str(), "num_threads", threads.c_str(),
      "request_timeout_ms", "10000",       nullptr,
  };
  mg_callbacks callbacks;
  std::memset(&callbacks, 0, sizeof(callbacks));
  mg_init_data init;
  init.callbacks = &callbacks;
  init.user_data = nullptr;
  init.configuration_options = config;
  unsigned error_code = 0;
  char error_text[256] = {};
  mg_error_data error;
  error.code = &error_code;
  error.text = error_text;
  error.text_buffer_size = sizeof(error_text);

  mg_context* context = mg_start2(&init, &error);
  if (context == nullptr) {
    return absl::UnavailableError(absl::StrCat(
        "cannot serve metrics on '", server->options_.listen_address,
        "': ", error_text[0] != '\0' ? error_text : "civetweb failed to start",
        " (address in use or not local?)"));
  }
  mg_server_port bound;
  std::memset(&bound, 0, sizeof(bound));
  if (mg_get_server_ports(context, 1, &bound) < 1 || bound.port <= 0) {
    mg_stop(context);
    return absl::InternalError(absl::StrCat("civetweb started on '",
                                            server->options_.listen_address,
                                            "' but reports no bound port"));
  }
  server->port_ = bound.port;
  // Every path: /metrics is answered, the rest gets 404 (never files).
  mg_set_request_handler(context, "/", &HandleRequest,
                         server->options_.registry);
  {
    absl::MutexLock lock(&server->mu_);
    server->context_ = context;
  }
  return server;
}

MetricsHttpServer::MetricsHttpServer(Options options, std::string host)
    : options_(std::move(options)), host_(std::move(host)) {}

MetricsHttpServer::~MetricsHttpServer() { Shutdown(); }

std::string MetricsHttpServer::address() const {
  return absl::StrCat(host_, ":", port_);
}

void MetricsHttpServer::Shutdown() {
  absl::MutexLock lock(&mu_);
  if (context_ == nullptr) return;
  mg_stop(context_);  // joins the threads, so no handler runs after this
  context_ = nullptr;
}

}  // namespace dcp
