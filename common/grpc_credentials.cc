#include "common/grpc_credentials.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>
#include <optional>
#include <sstream>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/status_macros.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/support/client_interceptor.h"

namespace dcp {
namespace {

constexpr size_t kMaxFileBytes = 1 << 20;
constexpr size_t kMinTokenChars = 16;
constexpr size_t kMaxJobIdChars = 128;
constexpr absl::string_view kBearerPrefix = "Bearer ";

/// The whole of a small file; NOT_FOUND naming `flag` and the file.
absl::StatusOr<std::string> ReadSmallFile(absl::string_view flag,
                                          const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::NotFoundError(absl::StrCat("--", flag, ": cannot read '", path,
                                            "': ", std::strerror(errno)));
  }
  std::ostringstream text;
  text << in.rdbuf();
  if (text.str().size() > kMaxFileBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--", flag, ": '", path, "' is over ", kMaxFileBytes, " bytes"));
  }
  return text.str();
}

/// A PEM file holding at least one `label` block ("CERTIFICATE", "PRIVATE
/// KEY"; a key's label may name its algorithm, "EC PRIVATE KEY").
absl::StatusOr<std::string> ReadPem(absl::string_view flag,
                                    const std::string& path,
                                    absl::string_view label) {
  ASSIGN_OR_RETURN(std::string pem, ReadSmallFile(flag, path));
  const bool key = label == "PRIVATE KEY";
  if (!absl::StrContains(pem, "-----BEGIN ") ||
      !absl::StrContains(pem, absl::StrCat(label, "-----"))) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", flag, ": '", path, "' holds no PEM ",
                     absl::AsciiStrToLower(label), " (-----BEGIN ",
                     key ? "... " : "", label, "-----)"));
  }
  if (key && absl::StrContains(pem, "ENCRYPTED")) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--", flag, ": '", path,
        "' is an encrypted key; gRPC needs it unencrypted (openssl pkey "
        "-in KEY -out PLAIN), readable by this user only"));
  }
  return pem;
}

/// The token of --auth_token_file: its text without surrounding white
/// space, at least `kMinTokenChars` printable non-space characters.
absl::StatusOr<std::string> ReadToken(const std::string& path) {
  ASSIGN_OR_RETURN(std::string text, ReadSmallFile("auth_token_file", path));
  const std::string token(absl::StripAsciiWhitespace(text));
  for (const char c : token) {
    if (c < 0x21 || c > 0x7e) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--auth_token_file: '", path,
          "' must hold one token of printable characters without spaces"));
    }
  }
  if (token.size() < kMinTokenChars) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--auth_token_file: the token in '", path, "' has ", token.size(),
        " characters; give at least ", kMinTokenChars,
        " (e.g. `openssl rand -hex 32 > ", path, "`)"));
  }
  return token;
}

absl::Status CheckJobId(absl::string_view job_id) {
  if (job_id.size() > kMaxJobIdChars) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--job_id: at most ", kMaxJobIdChars, " characters, not ",
        job_id.size()));
  }
  for (const char c : job_id) {
    if (!absl::ascii_isalnum(c) && c != '.' && c != '_' && c != ':' &&
        c != '-') {
      return absl::InvalidArgumentError(absl::StrCat(
          "--job_id '", absl::CEscape(job_id),
          "': only letters, digits, '.', '_', ':' and '-'"));
    }
  }
  return absl::OkStatus();
}

/// What both roles check: the id, the key with its certificate, no TLS
/// with --insecure.
absl::Status CheckCommon(const SecurityOptions& o) {
  RETURN_IF_ERROR(CheckJobId(o.job_id));
  if (o.tls_cert.empty() != o.tls_key.empty()) {
    return absl::InvalidArgumentError(
        "--tls_cert and --tls_key go together: give both (the certificate "
        "and its private key) or neither");
  }
  if (o.insecure && (!o.tls_cert.empty() || !o.tls_ca.empty())) {
    return absl::InvalidArgumentError(
        "--insecure (plaintext) contradicts --tls_cert/--tls_ca (TLS): give "
        "one or the other");
  }
  return absl::OkStatus();
}

/// The value a request's metadata holds for `key`; nullopt when absent.
/// Sets `duplicate` when it holds more than one.
std::optional<absl::string_view> MetadataValue(
    const std::multimap<grpc::string_ref, grpc::string_ref>& metadata,
    absl::string_view key, bool* duplicate) {
  const auto [begin, end] = metadata.equal_range(
      grpc::string_ref(key.data(), key.size()));
  if (begin == end) return std::nullopt;
  if (std::next(begin) != end) *duplicate = true;
  return absl::string_view(begin->second.data(), begin->second.size());
}

/// An attacker-chosen value, safe to quote in a message.
std::string Quoted(absl::string_view value) {
  return absl::StrCat("'", absl::CEscape(value.substr(0, kMaxJobIdChars)),
                      value.size() > kMaxJobIdChars ? "...'" : "'");
}

std::string JobSuffix(const std::string& job_id) {
  return job_id.empty() ? "" : absl::StrCat(", job '", job_id, "'");
}

/// Sends the bearer token as call credentials (TLS channels only: gRPC
/// does not attach call credentials to plaintext ones).
class BearerTokenPlugin final : public grpc::MetadataCredentialsPlugin {
 public:
  explicit BearerTokenPlugin(const std::string& token)
      : header_(absl::StrCat(kBearerPrefix, token)) {}

  bool IsBlocking() const override { return false; }
  const char* GetType() const override { return "dcp-bearer-token"; }
  grpc::Status GetMetadata(
      grpc::string_ref /*service_url*/, grpc::string_ref /*method_name*/,
      const grpc::AuthContext& /*channel_auth_context*/,
      std::multimap<std::string, std::string>* metadata) override {
    metadata->emplace(kAuthorizationMetadataKey, header_);
    return grpc::Status::OK;
  }
  std::string DebugString() override { return "dcp bearer token"; }

 private:
  const std::string header_;
};

using MetadataPairs = std::vector<std::pair<std::string, std::string>>;

/// Adds fixed metadata (the job id; the token in plaintext) to every call.
class MetadataInterceptor final : public grpc::experimental::Interceptor {
 public:
  explicit MetadataInterceptor(const MetadataPairs* pairs) : pairs_(pairs) {}

  void Intercept(
      grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(
            grpc::experimental::InterceptionHookPoints::
                PRE_SEND_INITIAL_METADATA)) {
      std::multimap<std::string, std::string>* metadata =
          methods->GetSendInitialMetadata();
      for (const auto& [key, value] : *pairs_) metadata->emplace(key, value);
    }
    methods->Proceed();
  }

 private:
  const MetadataPairs* const pairs_;
};

/// Owned by the channel, so the pairs outlive every call's interceptor.
class MetadataInterceptorFactory final
    : public grpc::experimental::ClientInterceptorFactoryInterface {
 public:
  explicit MetadataInterceptorFactory(MetadataPairs pairs)
      : pairs_(std::move(pairs)) {}

  grpc::experimental::Interceptor* CreateClientInterceptor(
      grpc::experimental::ClientRpcInfo* /*info*/) override {
    return new MetadataInterceptor(&pairs_);
  }

 private:
  const MetadataPairs pairs_;
};

/// The client's TLS credentials: its CA, and its certificate when given.
absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> ClientTls(
    const SecurityOptions& o) {
  grpc::SslCredentialsOptions ssl;
  ASSIGN_OR_RETURN(ssl.pem_root_certs,
                   ReadPem("tls_ca", o.tls_ca, "CERTIFICATE"));
  if (!o.tls_cert.empty()) {
    ASSIGN_OR_RETURN(ssl.pem_cert_chain,
                     ReadPem("tls_cert", o.tls_cert, "CERTIFICATE"));
    ASSIGN_OR_RETURN(ssl.pem_private_key,
                     ReadPem("tls_key", o.tls_key, "PRIVATE KEY"));
  }
  std::shared_ptr<grpc::ChannelCredentials> credentials =
      grpc::SslCredentials(ssl);
  if (credentials == nullptr) {
    return absl::InternalError("gRPC could not make TLS channel credentials");
  }
  return credentials;
}

/// Checks a client's options for `target`.
absl::Status CheckClient(const SecurityOptions& o, absl::string_view target) {
  RETURN_IF_ERROR(CheckCommon(o));
  const bool tls = !o.tls_ca.empty();
  if (!tls && !o.tls_cert.empty()) {
    return absl::InvalidArgumentError(
        "--tls_cert on a client is the certificate it presents for mutual "
        "TLS, which needs --tls_ca (the CA the server's certificate chains "
        "to)");
  }
  if (!tls && !o.tls_server_name.empty()) {
    return absl::InvalidArgumentError(
        "--tls_server_name needs --tls_ca (TLS)");
  }
  if (!tls && !o.insecure && !IsLoopbackAddress(target)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "refusing to connect in plaintext to '", target,
        "', which is not a loopback address: give --tls_ca (TLS; with "
        "--tls_cert and --tls_key for mutual TLS), or --insecure to connect "
        "in plaintext anyway"));
  }
  return absl::OkStatus();
}

}  // namespace

bool ConstantTimeEquals(absl::string_view expected, absl::string_view actual) {
  volatile unsigned char diff = expected.size() == actual.size() ? 0 : 1;
  for (size_t i = 0; i < expected.size(); ++i) {
    const unsigned char theirs =
        i < actual.size() ? static_cast<unsigned char>(actual[i]) : 0;
    diff = diff | (static_cast<unsigned char>(expected[i]) ^ theirs);
  }
  return diff == 0;
}

CallAuthenticator::CallAuthenticator(std::string job_id, std::string token)
    : job_id_(std::move(job_id)), token_(std::move(token)) {}

absl::Status CallAuthenticator::Check(
    std::optional<absl::string_view> authorization,
    std::optional<absl::string_view> job_id) const {
  if (!token_.empty()) {
    if (!authorization.has_value()) {
      return absl::UnauthenticatedError(
          "the request carries no bearer token and this server requires one "
          "(give the client --auth_token_file)");
    }
    absl::string_view token = *authorization;
    if (!absl::ConsumePrefix(&token, kBearerPrefix) ||
        !ConstantTimeEquals(token_, token)) {
      return absl::UnauthenticatedError(
          "the request's bearer token is not this server's (check "
          "--auth_token_file on both ends)");
    }
  }
  const absl::string_view theirs = job_id.value_or("");
  if (theirs == job_id_) return absl::OkStatus();
  if (job_id_.empty()) {
    return absl::PermissionDeniedError(absl::StrCat(
        "the request is for job ", Quoted(theirs),
        " but this server was started without --job_id"));
  }
  if (!job_id.has_value()) {
    return absl::PermissionDeniedError(
        absl::StrCat("the request names no job but this server serves job '",
                     job_id_, "' (give the client --job_id=", job_id_, ")"));
  }
  return absl::PermissionDeniedError(
      absl::StrCat("the request is for job ", Quoted(theirs),
                   " but this server serves job '", job_id_, "'"));
}

absl::Status CallAuthenticator::Check(
    const std::multimap<grpc::string_ref, grpc::string_ref>& metadata) const {
  bool duplicate = false;
  const std::optional<absl::string_view> authorization =
      MetadataValue(metadata, kAuthorizationMetadataKey, &duplicate);
  const std::optional<absl::string_view> job_id =
      MetadataValue(metadata, kJobIdMetadataKey, &duplicate);
  if (duplicate) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the request carries more than one '", kAuthorizationMetadataKey,
        "' or '", kJobIdMetadataKey, "' value"));
  }
  return Check(authorization, job_id);
}

absl::StatusOr<ServerSecurity> MakeServerSecurity(
    const SecurityOptions& o, absl::string_view listen_address) {
  RETURN_IF_ERROR(CheckCommon(o));
  if (!o.tls_server_name.empty()) {
    return absl::InvalidArgumentError(
        "--tls_server_name is a client option (the name the server's "
        "certificate must carry)");
  }
  const bool tls = !o.tls_cert.empty();
  if (!tls && !o.tls_ca.empty()) {
    return absl::InvalidArgumentError(
        "--tls_ca on a server asks clients for certificates (mutual TLS), "
        "which needs its own --tls_cert and --tls_key");
  }
  if (!tls && !o.insecure && !IsLoopbackAddress(listen_address)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "refusing to serve plaintext on '", listen_address,
        "', which is not a loopback address: give --tls_cert and --tls_key "
        "(TLS; with --tls_ca for mutual TLS), or --insecure to serve "
        "plaintext anyway"));
  }
  std::string token;
  if (!o.auth_token_file.empty()) {
    ASSIGN_OR_RETURN(token, ReadToken(o.auth_token_file));
  }
  ServerSecurity security;
  security.authenticator = CallAuthenticator(o.job_id, token);
  if (!tls) {
    security.credentials = grpc::InsecureServerCredentials();
    security.description =
        o.insecure ? "plaintext (--insecure)" : "plaintext (loopback)";
  } else {
    grpc::SslServerCredentialsOptions ssl(
        o.tls_ca.empty()
            ? GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE
            : GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
    grpc::SslServerCredentialsOptions::PemKeyCertPair pair;
    ASSIGN_OR_RETURN(pair.cert_chain,
                     ReadPem("tls_cert", o.tls_cert, "CERTIFICATE"));
    ASSIGN_OR_RETURN(pair.private_key,
                     ReadPem("tls_key", o.tls_key, "PRIVATE KEY"));
    ssl.pem_key_cert_pairs.push_back(std::move(pair));
    if (!o.tls_ca.empty()) {
      ASSIGN_OR_RETURN(ssl.pem_root_certs,
                       ReadPem("tls_ca", o.tls_ca, "CERTIFICATE"));
    }
    security.credentials = grpc::SslServerCredentials(ssl);
    security.description = o.tls_ca.empty() ? "TLS" : "mutual TLS";
  }
  if (!token.empty()) absl::StrAppend(&security.description, ", bearer token");
  absl::StrAppend(&security.description, JobSuffix(o.job_id));
  return security;
}

absl::StatusOr<std::shared_ptr<grpc::Channel>> CreateSecureChannel(
    absl::string_view target, const SecurityOptions& o,
    grpc::ChannelArguments args) {
  RETURN_IF_ERROR(CheckClient(o, target));
  const bool tls = !o.tls_ca.empty();
  std::string token;
  if (!o.auth_token_file.empty()) {
    ASSIGN_OR_RETURN(token, ReadToken(o.auth_token_file));
  }
  std::shared_ptr<grpc::ChannelCredentials> credentials;
  MetadataPairs pairs;
  if (!o.job_id.empty()) pairs.emplace_back(kJobIdMetadataKey, o.job_id);
  if (tls) {
    ASSIGN_OR_RETURN(credentials, ClientTls(o));
    if (!token.empty()) {
      credentials = grpc::CompositeChannelCredentials(
          credentials, grpc::MetadataCredentialsFromPlugin(
                           std::make_unique<BearerTokenPlugin>(token)));
    }
    if (!o.tls_server_name.empty()) {
      args.SetSslTargetNameOverride(o.tls_server_name);
    }
  } else {
    credentials = grpc::InsecureChannelCredentials();
    if (!token.empty()) {
      pairs.emplace_back(kAuthorizationMetadataKey,
                         absl::StrCat(kBearerPrefix, token));
    }
  }
  const std::string address(target);
  if (pairs.empty()) {
    return grpc::CreateCustomChannel(address, credentials, args);
  }
  std::vector<std::unique_ptr<
      grpc::experimental::ClientInterceptorFactoryInterface>>
      interceptors;
  interceptors.push_back(
      std::make_unique<MetadataInterceptorFactory>(std::move(pairs)));
  return grpc::experimental::CreateCustomChannelWithInterceptors(
      address, credentials, args, std::move(interceptors));
}

absl::Status WithConnectionHint(const absl::Status& status,
                                const SecurityOptions& o) {
  if (!absl::IsUnavailable(status) && !absl::IsDeadlineExceeded(status)) {
    return status;
  }
  const std::string hint =
      o.tls_ca.empty()
          ? "this client speaks plaintext: a scheduler with --tls_cert needs "
            "--tls_ca (TLS)"
      : o.tls_cert.empty()
          ? "this client has no certificate: a scheduler with --tls_ca "
            "(mutual TLS) needs --tls_cert and --tls_key that CA signed, and "
            "its certificate must chain to this --tls_ca"
          : "a scheduler refuses a client certificate its --tls_ca did not "
            "sign, and this client a scheduler certificate this --tls_ca did "
            "not sign or that does not name the target (--tls_server_name)";
  return absl::Status(
      status.code(),
      absl::StrCat(status.message(), " (is the scheduler up? If so, ", hint,
                   "; the scheduler's log names a refused handshake)"));
}

std::string DescribeChannelSecurity(const SecurityOptions& o) {
  std::string text = o.tls_ca.empty()     ? "plaintext"
                     : o.tls_cert.empty() ? "TLS"
                                          : "mutual TLS";
  if (!o.auth_token_file.empty()) absl::StrAppend(&text, ", bearer token");
  absl::StrAppend(&text, JobSuffix(o.job_id));
  return text;
}

}  // namespace dcp
