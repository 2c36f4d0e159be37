#ifndef DCP_COMMON_GRPC_CREDENTIALS_H_
#define DCP_COMMON_GRPC_CREDENTIALS_H_

/// The one place dcp builds gRPC credentials: a server's from its
/// `SecurityOptions` (TLS or mutual TLS, the check every request must pass)
/// and a client's channel (TLS, its certificate, the bearer token and the
/// job id on every call). Includes grpc++: for gRPC edges only.

#include <map>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/security_options.h"
#include "grpcpp/channel.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/support/channel_arguments.h"
#include "grpcpp/support/string_ref.h"

namespace dcp {

/// The metadata a dcp client sends with every call: the job id and the
/// bearer token ("Bearer <token>").
inline constexpr char kJobIdMetadataKey[] = "dcp-job-id";
inline constexpr char kAuthorizationMetadataKey[] = "authorization";

/// Whether two byte strings are equal, in a time that depends only on the
/// length of `expected` (the secret), never on where `actual` differs.
bool ConstantTimeEquals(absl::string_view expected, absl::string_view actual);

/// What every request to a server must carry: its bearer token (when it has
/// one) and its job id (the same id, or none when the server has none).
/// Checks the token first, so a stranger learns nothing about the job.
///
/// Thread-safe (immutable); cheap to copy.
///
///   CallAuthenticator auth("job-a", token);
///   absl::Status s = auth.Check(context->client_metadata());
class CallAuthenticator {
 public:
  /// Requires nothing but that requests name no job.
  CallAuthenticator() = default;
  /// `token` empty: no token required.
  CallAuthenticator(std::string job_id, std::string token);

  /// `authorization` and `job_id`: the request's metadata values, nullopt
  /// when absent. UNAUTHENTICATED for a missing or wrong token,
  /// PERMISSION_DENIED naming both jobs when the ids differ.
  absl::Status Check(std::optional<absl::string_view> authorization,
                     std::optional<absl::string_view> job_id) const;
  /// The same on a call's client metadata.
  absl::Status Check(
      const std::multimap<grpc::string_ref, grpc::string_ref>& metadata) const;

  const std::string& job_id() const { return job_id_; }
  bool requires_token() const { return !token_.empty(); }

 private:
  std::string job_id_;
  std::string token_;
};

/// A server's side of `SecurityOptions`: the credentials of its port and
/// the check of each request.
struct ServerSecurity {
  std::shared_ptr<grpc::ServerCredentials> credentials;
  CallAuthenticator authenticator;
  /// For logs, e.g. "mutual TLS, bearer token, job 'a'" or "plaintext
  /// (loopback)".
  std::string description;
};

/// Reads the files `options` names and builds the credentials of a server
/// listening on `listen_address`. INVALID_ARGUMENT for contradictory or
/// incomplete options and for plaintext on a non-loopback address without
/// `insecure`; NOT_FOUND / INVALID_ARGUMENT naming a file that cannot be
/// read or holds no PEM certificate, key or valid token.
absl::StatusOr<ServerSecurity> MakeServerSecurity(
    const SecurityOptions& options, absl::string_view listen_address);

/// A channel to `target` secured as `options` says: TLS against `tls_ca`
/// (with `tls_cert`/`tls_key` for mutual TLS), the bearer token as call
/// credentials, and `kJobIdMetadataKey` (and, in plaintext, the token) added
/// to every call by an interceptor. `args` are the caller's channel
/// arguments. Errors as `MakeServerSecurity`'s, for the client's options;
/// plaintext to a non-loopback target needs `insecure`.
absl::StatusOr<std::shared_ptr<grpc::Channel>> CreateSecureChannel(
    absl::string_view target, const SecurityOptions& options,
    grpc::ChannelArguments args = grpc::ChannelArguments());

/// For logs: how `CreateSecureChannel` secures a channel with `options`,
/// e.g. "mutual TLS, bearer token, job 'a'" or "plaintext".
std::string DescribeChannelSecurity(const SecurityOptions& options);

/// `status` of a call on a channel made with `options`; when it is
/// UNAVAILABLE or DEADLINE_EXCEEDED (what a refused TLS handshake looks
/// like to a client, which gRPC tells no more about), with a hint at the
/// TLS options appended. Other statuses are returned as they are.
absl::Status WithConnectionHint(const absl::Status& status,
                                const SecurityOptions& options);

}  // namespace dcp

#endif  // DCP_COMMON_GRPC_CREDENTIALS_H_
