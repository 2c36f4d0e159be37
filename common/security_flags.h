#ifndef DCP_COMMON_SECURITY_FLAGS_H_
#define DCP_COMMON_SECURITY_FLAGS_H_

#include "common/security_options.h"

namespace dcp {

/// The `SecurityOptions` flags, defined once for every main that links this
/// library (dcp-scheduler, dcp-agent, dcp-ctl): --tls_cert, --tls_key,
/// --tls_ca, --tls_server_name, --auth_token_file, --insecure and
/// --job_id. Only mains depend on it (BUILD visibility); libraries take a
/// `SecurityOptions`.
SecurityOptions SecurityOptionsFromFlags();

/// Those flags' line of a main's usage message.
inline constexpr char kSecurityFlagsUsage[] =
    "    [--tls_ca=PEM [--tls_cert=PEM --tls_key=PEM] [--tls_server_name=NAME]]"
    " [--auth_token_file=FILE] [--job_id=ID] [--insecure]";

}  // namespace dcp

#endif  // DCP_COMMON_SECURITY_FLAGS_H_
