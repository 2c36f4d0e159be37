#ifndef DCP_COMMON_SECURITY_OPTIONS_H_
#define DCP_COMMON_SECURITY_OPTIONS_H_

#include <string>

#include "absl/strings/string_view.h"

namespace dcp {

/// How one end of a dcp gRPC connection (the scheduler's port, or an agent,
/// client or dcp-ctl reaching it) secures it. The same struct serves both
/// roles; common/grpc_credentials.h turns it into server or channel
/// credentials, and common/security_flags.h fills it from the flags of the
/// same names (so the error messages name the flags). Plain data: no gRPC
/// types, cheap to copy.
///
/// Server                                  | Client
/// --------------------------------------- | -------------------------------
/// tls_cert + tls_key: TLS                 | tls_ca: TLS, the server verified
/// + tls_ca: mutual TLS, clients must      | + tls_cert + tls_key: the
///   present a certificate tls_ca signed   |   certificate it presents
/// auth_token_file: every request must     | auth_token_file: the token sent
///   carry this bearer token               |   with every request
/// job_id: every request must name it      | job_id: named on every request
/// plaintext: loopback only, unless        | plaintext: to loopback only,
///   `insecure`                            |   unless `insecure`
///
///   SecurityOptions security;
///   security.tls_cert = "/etc/dcp/scheduler.crt";
///   security.tls_key = "/etc/dcp/scheduler.key";
///   security.tls_ca = "/etc/dcp/ca.crt";   // mutual TLS
///   security.job_id = "llama-70b-run-7";
struct SecurityOptions {
  /// PEM file: this end's certificate chain (leaf first). A server's TLS
  /// certificate; a client's certificate for mutual TLS. Read once, at
  /// start-up.
  std::string tls_cert;
  /// PEM file: the private key of `tls_cert`. Set both or neither.
  std::string tls_key;
  /// PEM file of CA certificates. Server: clients must present a
  /// certificate one of them signed (mutual TLS). Client: the server's
  /// certificate must chain to one of them; setting it turns TLS on (give
  /// /etc/ssl/certs/ca-certificates.crt for a server with a public
  /// certificate).
  std::string tls_ca;
  /// Client: the name the server's certificate must carry, when it is not
  /// the host of the target (e.g. a target given by IP address). Empty: the
  /// target's host.
  std::string tls_server_name;
  /// File holding a shared bearer token (one line, at least 16 printable
  /// characters, e.g. `openssl rand -hex 32`), for sites without a PKI.
  /// Server: requests without it are refused (UNAUTHENTICATED). Client: sent
  /// with every request, as call credentials on TLS; on a plaintext
  /// connection (loopback, or `insecure`) as the same metadata, in the
  /// clear.
  std::string auth_token_file;
  /// Allows plaintext on a non-loopback address: without it, a server
  /// refuses to listen, and a client to connect, in plaintext anywhere but
  /// loopback and Unix sockets. Contradicts the TLS options.
  bool insecure = false;
  /// The job this end belongs to (letters, digits, '.', '_', ':', '-'; at
  /// most 128). Server: every request must carry the same id (none when
  /// empty), or it is refused with PERMISSION_DENIED naming both, so that
  /// the agents of one job cannot act for another job's ranks. Client:
  /// sent with every request.
  std::string job_id;
};

/// Whether `address`, a gRPC listen address or target, only reaches this
/// host: "localhost", 127.0.0.0/8, ::1 (also as ::ffff:127.x.y.z), a Unix
/// socket ("unix:", "unix-abstract:"), with or without a port and a "dns:",
/// "ipv4:" or "ipv6:" scheme (every address of a list must be). False for
/// wildcards (0.0.0.0, [::]), host names and other schemes.
bool IsLoopbackAddress(absl::string_view address);

}  // namespace dcp

#endif  // DCP_COMMON_SECURITY_OPTIONS_H_
