"""gRPC for dcp's Python client: the error type, the secured channel to a
dcp-scheduler (as common/grpc_credentials.cc makes it for the C++ agent)
and the stubs of dcp.v1.Scheduler and dcp.v1.Agent.

The stubs are written out here over ``channel.unary_unary`` /
``unary_stream`` with the messages' own serializers, so no grpc_tools
generated code is needed (see dcp._messages); each method's path and types
are looked up in the shipped schema, and descriptor_set_test checks the
streaming kinds written here against it.
"""

import ipaddress

import grpc

from dcp import _messages as pb
from dcp._errors import Error, invalid  # noqa: F401 - re-exported.

# The metadata every call to a scheduler carries (common/grpc_credentials.h).
JOB_ID_METADATA_KEY = "dcp-job-id"
AUTHORIZATION_METADATA_KEY = "authorization"

_MAX_FILE_BYTES = 1 << 20
_MIN_TOKEN_CHARS = 16
_MAX_JOB_ID_CHARS = 128


def code_of(rpc_error):
    """The status code name of a grpc.RpcError ("UNKNOWN" when it has
    none)."""
    code = rpc_error.code() if hasattr(rpc_error, "code") else None
    return code.name if code is not None else "UNKNOWN"


def details_of(rpc_error):
    details = rpc_error.details() if hasattr(rpc_error, "details") else None
    return details or str(rpc_error)


def from_rpc_error(rpc_error, prefix=""):
    """The dcp.Error of a failed call, its message after ``prefix``."""
    return Error(code_of(rpc_error), prefix + details_of(rpc_error))


# ---- Loopback addresses (common/security_options.cc) -----------------------

def _host_of(host_port):
    """The host of "host", "host:port", "[v6]:port" or a bare IPv6
    address."""
    if host_port.startswith("["):
        close = host_port.find("]")
        return "" if close < 0 else host_port[1:close]
    colon = host_port.find(":")
    if colon < 0:
        return host_port
    if host_port.find(":", colon + 1) >= 0:  # A bare IPv6 address.
        return host_port
    return host_port[:colon]


def _is_loopback_host(host):
    if host.lower() == "localhost":
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    if address.version == 6 and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return address.is_loopback


def is_loopback_address(address):
    """Whether a gRPC target only reaches this host: localhost, 127.0.0.0/8,
    ::1 (also ::ffff:127.x.y.z), a Unix socket; with or without a port and
    a "dns:", "ipv4:" or "ipv6:" scheme (every address of a list must be)."""
    if address.startswith("unix:") or address.startswith("unix-abstract:"):
        return True
    if address.startswith("dns:"):
        address = address[len("dns:"):]
        names_server = False
        if address.startswith("//"):
            address = address[2:]
            slash = address.find("/")
            if slash < 0:
                return False
            names_server = slash > 0
            address = address[slash + 1:]
        host = _host_of(address)
        if names_server and host.lower() == "localhost":
            return False
        return _is_loopback_host(host)
    for scheme in ("ipv4:", "ipv6:"):
        if address.startswith(scheme):
            return all(_is_loopback_host(_host_of(one))
                       for one in address[len(scheme):].split(","))
    return _is_loopback_host(_host_of(address))


# ---- Security options (common/grpc_credentials.cc, client side) ------------

class Security:
    """How the connection to the scheduler is secured: dcp.Client's
    ``tls_ca``, ``tls_cert``, ``tls_key``, ``tls_server_name``,
    ``auth_token_file``, ``job_id`` and ``insecure``."""

    def __init__(self, tls_ca=None, tls_cert=None, tls_key=None,
                 tls_server_name=None, auth_token_file=None, job_id=None,
                 insecure=False):
        self.tls_ca = tls_ca or ""
        self.tls_cert = tls_cert or ""
        self.tls_key = tls_key or ""
        self.tls_server_name = tls_server_name or ""
        self.auth_token_file = auth_token_file or ""
        self.job_id = job_id or ""
        self.insecure = bool(insecure)

    def any_set(self):
        return bool(self.tls_ca or self.tls_cert or self.tls_key or
                    self.tls_server_name or self.auth_token_file or
                    self.job_id or self.insecure)

    def connection_hint(self, error):
        """``error`` with a hint at the TLS options when it says the
        scheduler could not be reached (what a refused handshake looks like
        to a client)."""
        if error.code not in ("UNAVAILABLE", "DEADLINE_EXCEEDED"):
            return error
        if not self.tls_ca:
            hint = ("this client speaks plaintext: a scheduler with "
                    "--tls_cert needs tls_ca= (TLS)")
        elif not self.tls_cert:
            hint = ("this client has no certificate: a scheduler with "
                    "--tls_ca (mutual TLS) needs tls_cert= and tls_key= "
                    "that CA signed, and its certificate must chain to this "
                    "tls_ca")
        else:
            hint = ("a scheduler refuses a client certificate its --tls_ca "
                    "did not sign, and this client a scheduler certificate "
                    "this tls_ca did not sign or that does not name the "
                    "target (tls_server_name=)")
        return Error(error.code, "%s (is the scheduler up? If so, %s; the "
                     "scheduler's log names a refused handshake)"
                     % (error.message, hint))


def _read_small_file(option, path):
    try:
        with open(path, "rb") as f:
            data = f.read(_MAX_FILE_BYTES + 1)
    except OSError as e:
        raise Error("NOT_FOUND", "%s: cannot read '%s': %s"
                    % (option, path, e.strerror or e)) from None
    if len(data) > _MAX_FILE_BYTES:
        raise invalid("%s: '%s' is over %d bytes"
                      % (option, path, _MAX_FILE_BYTES))
    return data


def _read_pem(option, path, label):
    pem = _read_small_file(option, path)
    key = label == "PRIVATE KEY"
    if b"-----BEGIN " not in pem or (label + "-----").encode() not in pem:
        raise invalid("%s: '%s' holds no PEM %s (-----BEGIN %s%s-----)"
                      % (option, path, label.lower(), "... " if key else "",
                         label))
    if key and b"ENCRYPTED" in pem:
        raise invalid("%s: '%s' is an encrypted key; gRPC needs it "
                      "unencrypted (openssl pkey -in KEY -out PLAIN), "
                      "readable by this user only" % (option, path))
    return pem


def _read_token(path):
    token = _read_small_file("auth_token_file", path).strip()
    if any(c < 0x21 or c > 0x7e for c in token):
        raise invalid("auth_token_file: '%s' must hold one token of printable "
                      "characters without spaces" % path)
    if len(token) < _MIN_TOKEN_CHARS:
        raise invalid("auth_token_file: the token in '%s' has %d characters; "
                      "give at least %d (e.g. `openssl rand -hex 32 > %s`)"
                      % (path, len(token), _MIN_TOKEN_CHARS, path))
    return token.decode("ascii")


def _check_job_id(job_id):
    if len(job_id) > _MAX_JOB_ID_CHARS:
        raise invalid("job_id: at most %d characters, not %d"
                      % (_MAX_JOB_ID_CHARS, len(job_id)))
    for c in job_id:
        if not (c.isascii() and c.isalnum()) and c not in "._:-":
            raise invalid("job_id %r: only letters, digits, '.', '_', ':' "
                          "and '-'" % job_id)


def _check_client(o, target):
    _check_job_id(o.job_id)
    if bool(o.tls_cert) != bool(o.tls_key):
        raise invalid("tls_cert and tls_key go together: give both (the "
                      "certificate and its private key) or neither")
    if o.insecure and (o.tls_cert or o.tls_ca):
        raise invalid("insecure=True (plaintext) contradicts tls_cert/tls_ca "
                      "(TLS): give one or the other")
    tls = bool(o.tls_ca)
    if not tls and o.tls_cert:
        raise invalid("tls_cert on a client is the certificate it presents "
                      "for mutual TLS, which needs tls_ca (the CA the "
                      "server's certificate chains to)")
    if not tls and o.tls_server_name:
        raise invalid("tls_server_name needs tls_ca (TLS)")
    if not tls and not o.insecure and not is_loopback_address(target):
        raise invalid("refusing to connect in plaintext to '%s', which is "
                      "not a loopback address: give tls_ca= (TLS; with "
                      "tls_cert= and tls_key= for mutual TLS), or "
                      "insecure=True to connect in plaintext anyway" % target)


# Reconnection as the C++ agent's channel (worker_agent/agent.cc).
_CHANNEL_OPTIONS = [
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.min_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 2000),
    ("grpc.max_receive_message_length", 64 << 20),
]


def scheduler_channel(target, security):
    """(channel, metadata) to the scheduler at ``target``: TLS against
    ``tls_ca`` (with ``tls_cert``/``tls_key`` for mutual TLS), and the
    metadata every call must carry (the job id, the bearer token). Raises
    dcp.Error: INVALID_ARGUMENT for contradictory or incomplete options and
    plaintext to a non-loopback target without ``insecure``; NOT_FOUND or
    INVALID_ARGUMENT naming a file that cannot be read or holds no PEM
    certificate, key or valid token. Nothing is sent before that."""
    o = security
    _check_client(o, target)
    metadata = []
    if o.job_id:
        metadata.append((JOB_ID_METADATA_KEY, o.job_id))
    if o.auth_token_file:
        # On TLS gRPC's call credentials would send the same header.
        metadata.append((AUTHORIZATION_METADATA_KEY,
                         "Bearer " + _read_token(o.auth_token_file)))
    options = list(_CHANNEL_OPTIONS)
    if not o.tls_ca:
        return grpc.insecure_channel(target, options=options), metadata
    root = _read_pem("tls_ca", o.tls_ca, "CERTIFICATE")
    cert = key = None
    if o.tls_cert:
        cert = _read_pem("tls_cert", o.tls_cert, "CERTIFICATE")
        key = _read_pem("tls_key", o.tls_key, "PRIVATE KEY")
    credentials = grpc.ssl_channel_credentials(
        root_certificates=root, private_key=key, certificate_chain=cert)
    if o.tls_server_name:
        options.append(("grpc.ssl_target_name_override", o.tls_server_name))
    return (grpc.secure_channel(target, credentials, options=options),
            metadata)


# ---- Stubs ------------------------------------------------------------------

# Each method's streaming kind; descriptor_set_test checks them.
UNARY, SERVER_STREAMING = "unary", "server_streaming"
SCHEDULER_METHODS = {
    "Register": UNARY,
    "StreamPlans": SERVER_STREAMING,
    "ReportTimings": UNARY,
    "ReportProfile": UNARY,
    "GetStatus": UNARY,
    "Drain": UNARY,
}
AGENT_METHODS = {
    "NextStep": UNARY,
    "ReportTimings": UNARY,
}


def _bind(channel, service_name, methods):
    service = pb.service(service_name)
    bound = {}
    for name, kind in methods.items():
        method = service.FindMethodByName(name)
        request = pb.message_class(method.input_type.name)
        response = pb.message_class(method.output_type.name)
        path = "/%s/%s" % (service.full_name, name)
        make = channel.unary_stream if kind == SERVER_STREAMING else \
            channel.unary_unary
        bound[name] = make(path, request_serializer=request.SerializeToString,
                           response_deserializer=response.FromString)
    return bound


class SchedulerStub:
    """dcp.v1.Scheduler's calls a client makes (proto/scheduler_service.proto):
    ``Register``, ``StreamPlans``, ``ReportTimings``, ``ReportProfile``,
    ``GetStatus``, ``Drain``, each a grpc multi-callable."""

    def __init__(self, channel):
        for name, call in _bind(channel, "Scheduler",
                                SCHEDULER_METHODS).items():
            setattr(self, name, call)


class AgentStub:
    """dcp.v1.Agent (proto/agent_service.proto), a dcp-agent's sidecar
    socket: ``NextStep``, ``ReportTimings``."""

    def __init__(self, channel):
        for name, call in _bind(channel, "Agent", AGENT_METHODS).items():
            setattr(self, name, call)
