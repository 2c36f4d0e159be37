#include "common/security_flags.h"

#include <string>

#include "absl/flags/flag.h"

ABSL_FLAG(std::string, tls_cert, "",
          "PEM certificate chain: the scheduler's TLS certificate, or the "
          "client certificate an agent or dcp-ctl presents for mutual TLS "
          "(with --tls_key).");
ABSL_FLAG(std::string, tls_key, "",
          "PEM private key of --tls_cert (unencrypted; keep it readable by "
          "this user only).");
ABSL_FLAG(std::string, tls_ca, "",
          "PEM CA certificates. Scheduler: clients must present a certificate "
          "one of them signed (mutual TLS). Agent, dcp-ctl: the scheduler's "
          "certificate must chain to one of them; turns TLS on.");
ABSL_FLAG(std::string, tls_server_name, "",
          "Agent, dcp-ctl: the name the scheduler's certificate must carry "
          "when it is not the host of --scheduler (e.g. an IP address).");
ABSL_FLAG(std::string, auth_token_file, "",
          "File holding a shared bearer token (at least 16 printable "
          "characters; `openssl rand -hex 32`). Scheduler: refuses requests "
          "without it. Agent, dcp-ctl: send it with every request.");
ABSL_FLAG(bool, insecure, false,
          "Allow plaintext gRPC on a non-loopback address (without TLS, only "
          "loopback and Unix sockets are served or reached).");
ABSL_FLAG(std::string, job_id, "",
          "The job's id. Scheduler: refuses requests that name another job "
          "(or none, when set). Agent, dcp-ctl: named on every request.");

namespace dcp {

SecurityOptions SecurityOptionsFromFlags() {
  SecurityOptions options;
  options.tls_cert = absl::GetFlag(FLAGS_tls_cert);
  options.tls_key = absl::GetFlag(FLAGS_tls_key);
  options.tls_ca = absl::GetFlag(FLAGS_tls_ca);
  options.tls_server_name = absl::GetFlag(FLAGS_tls_server_name);
  options.auth_token_file = absl::GetFlag(FLAGS_auth_token_file);
  options.insecure = absl::GetFlag(FLAGS_insecure);
  options.job_id = absl::GetFlag(FLAGS_job_id);
  return options;
}

}  // namespace dcp
