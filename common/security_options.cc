#include "common/security_options.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace dcp {
namespace {

/// The host of "host", "host:port", "[v6]:port" or a bare IPv6 address.
absl::string_view HostOf(absl::string_view host_port) {
  if (absl::ConsumePrefix(&host_port, "[")) {
    const size_t close = host_port.find(']');
    return close == absl::string_view::npos ? absl::string_view()
                                            : host_port.substr(0, close);
  }
  const size_t colon = host_port.find(':');
  if (colon == absl::string_view::npos) return host_port;
  // More than one colon and no brackets: a bare IPv6 address.
  if (host_port.find(':', colon + 1) != absl::string_view::npos) {
    return host_port;
  }
  return host_port.substr(0, colon);
}

bool IsLoopbackHost(absl::string_view host) {
  if (absl::EqualsIgnoreCase(host, "localhost")) return true;
  const std::string text(host);
  in_addr v4;
  if (inet_pton(AF_INET, text.c_str(), &v4) == 1) {
    return (ntohl(v4.s_addr) >> 24) == 127;
  }
  in6_addr v6;
  if (inet_pton(AF_INET6, text.c_str(), &v6) == 1) {
    return IN6_IS_ADDR_LOOPBACK(&v6) ||
           (IN6_IS_ADDR_V4MAPPED(&v6) && v6.s6_addr[12] == 127);
  }
  return false;
}

}  // namespace

bool IsLoopbackAddress(absl::string_view address) {
  if (absl::StartsWith(address, "unix:") ||
      absl::StartsWith(address, "unix-abstract:")) {
    return true;
  }
  if (absl::ConsumePrefix(&address, "dns:")) {
    // "dns://authority/host:port": the authority is a DNS server, which
    // may resolve even "localhost" elsewhere; only IP literals count.
    bool names_server = false;
    if (absl::ConsumePrefix(&address, "//")) {
      const size_t slash = address.find('/');
      if (slash == absl::string_view::npos) return false;
      names_server = slash > 0;
      address.remove_prefix(slash + 1);
    }
    const absl::string_view host = HostOf(address);
    if (names_server && absl::EqualsIgnoreCase(host, "localhost")) {
      return false;
    }
    return IsLoopbackHost(host);
  }
  if (absl::ConsumePrefix(&address, "ipv4:") ||
      absl::ConsumePrefix(&address, "ipv6:")) {
    const std::vector<absl::string_view> list = absl::StrSplit(address, ',');
    for (absl::string_view one : list) {
      if (!IsLoopbackHost(HostOf(one))) return false;
    }
    return true;
  }
  return IsLoopbackHost(HostOf(address));
}

}  // namespace dcp
