"""`dcp_proto_library`: C++ (and gRPC) code from .proto files, offline.

Runs the system `protoc` (Debian `protobuf-compiler`) and, with `grpc = True`,
the system `grpc_cpp_plugin` (`protobuf-compiler-grpc`) in a genrule, then wraps
the generated sources in a cc_library linked against `@protobuf` (and
`@grpc`). Neither rules_proto nor a protobuf source tree is needed.

    load("//proto:defs.bzl", "dcp_proto_library")

    dcp_proto_library(
        name = "scheduler_service_proto",
        srcs = ["scheduler_service.proto"],  # import "proto/plan.proto";
        deps = [":plan_proto"],
        grpc = True,
    )

For `proto/plan.proto` this makes:

  - `plan_proto`: the cc_library; C++ code includes `"proto/plan.pb.h"` (and
    `"proto/scheduler_service.grpc.pb.h"` for services);
  - `plan_proto_srcs`: a filegroup of the .proto files of the library and of
    all its deps, which is what a dependent library's protoc run needs to see.

Paths: protoc runs in the execroot with `-I.`, so a .proto file's import path
is its workspace-relative path (`import "proto/plan.proto";`), and writes under
`$(GENDIR)`, the root of the output tree that Bazel adds to the include path,
so each generated file lands exactly where the genrule declares it.
`google/protobuf/*.proto` (well-known types) come from `/usr/include`, where
Debian's `libprotobuf-dev` installs them next to the headers and library they
are compiled against.

Limits: sources must live in the main repository; protoc and the plugin are
taken from the system, so Bazel does not notice when the packages are upgraded
(`bazel clean` then).
"""

load("@rules_cc//cc:defs.bzl", "cc_library")

_SRCS_SUFFIX = "_srcs"

def _srcs_label(dep):
    """The `<name>_srcs` filegroup beside the dcp_proto_library `dep`."""
    if ":" in dep:
        return dep + _SRCS_SUFFIX

    # "//foo/bar" is short for "//foo/bar:bar"; "name" is a local target.
    if dep.startswith("//") or dep.startswith("@"):
        return "%s:%s%s" % (dep, dep.split("/")[-1], _SRCS_SUFFIX)
    return dep + _SRCS_SUFFIX

def _generated(srcs, suffixes):
    outs = []
    for src in srcs:
        if not src.endswith(".proto"):
            fail("dcp_proto_library srcs must be .proto files, got %s" % src)
        stem = src[:-len(".proto")]
        outs += [stem + suffix for suffix in suffixes]
    return outs

# Finds a program on PATH, else at /usr/bin, and stores it in a shell variable.
_FIND_TOOL = (
    "{var}=$$(command -v {tool} || true); " +
    "if [ -z \"$${var}\" ]; then {var}=/usr/bin/{tool}; fi; " +
    "if [ ! -x \"$${var}\" ]; then " +
    "echo '{tool} not found: run tools/setup.sh' >&2; exit 1; fi; "
)

def dcp_proto_library(name, srcs, deps = [], grpc = False, **kwargs):
    """C++ library generated from `srcs` with the system protoc.

    Args:
      name: name of the cc_library; `<name>_srcs` and `<name>_gen` are made too.
      srcs: .proto files of this package (proto3).
      deps: other dcp_proto_library targets whose .proto files `srcs` import.
      grpc: also generate gRPC service stubs (`.grpc.pb.h/.grpc.pb.cc`).
      **kwargs: visibility, testonly, tags, ... applied to every target.
    """
    dep_srcs = [_srcs_label(dep) for dep in deps]

    native.filegroup(
        name = name + _SRCS_SUFFIX,
        srcs = srcs + dep_srcs,
        **kwargs
    )

    hdr_suffixes = [".pb.h"]
    cc_suffixes = [".pb.cc"]
    if grpc:
        hdr_suffixes.append(".grpc.pb.h")
        cc_suffixes.append(".grpc.pb.cc")
    hdrs = _generated(srcs, hdr_suffixes)
    cc_srcs = _generated(srcs, cc_suffixes)

    cmd = "set -e; " + _FIND_TOOL.format(var = "PROTOC", tool = "protoc")
    plugin_flags = ""
    if grpc:
        cmd += _FIND_TOOL.format(var = "GRPC_PLUGIN", tool = "grpc_cpp_plugin")
        plugin_flags = ("--plugin=protoc-gen-grpc=$$GRPC_PLUGIN " +
                        "--grpc_out=$(GENDIR) ")
    cmd += ("\"$$PROTOC\" -I. -I/usr/include --cpp_out=$(GENDIR) " +
            plugin_flags +
            " ".join(["$(location %s)" % src for src in srcs]))

    native.genrule(
        name = name + "_gen",
        srcs = srcs + dep_srcs,
        outs = hdrs + cc_srcs,
        cmd = cmd,
        message = "Generating C++ from %s" % ", ".join(srcs),
        **kwargs
    )

    cc_library(
        name = name,
        srcs = cc_srcs,
        hdrs = hdrs,
        deps = deps + ["@protobuf"] + (["@grpc"] if grpc else []),
        **kwargs
    )
