"""The system CUDA toolkit (and NCCL) for targets built with `--config=cuda`.

Bazel refuses headers outside the workspace that the C++ toolchain does not
list as built-in, and /usr/local/cuda/include is not. Rather than edit the
WORKSPACE, `cuda_headers` copies the toolkit's include directory into the
output tree (one tree artifact) and exports it as a system include directory:

    load("//third_party/cuda:cuda.bzl", "cuda_headers")

    cuda_headers(name = "cuda_headers")   # <CUDA_PATH>/include
    cc_library(name = "x", srcs = ["x.cc"], deps = [":cuda_headers"])

Limits: the copy runs outside Bazel's view of its inputs, so a CUDA upgrade
is noticed only after `bazel clean` (like the pkg-config libraries of
third_party/system_library.bzl). NCCL is found there too when it sits in the
toolkit's include directory, or in /usr/include (Debian's libnccl-dev).
"""

# Where the toolkit is installed; the linkopts of //third_party/cuda:cuda_runtime and
# //third_party/cuda:nccl use the same path.
CUDA_PATH = "/usr/local/cuda"

CUDA_LIB_DIR = CUDA_PATH + "/lib64"

def _cuda_headers_impl(ctx):
    include = ctx.actions.declare_directory(ctx.label.name + "_include")
    src = ctx.attr.cuda_path + "/include"
    ctx.actions.run_shell(
        outputs = [include],
        command = (
            "if [ ! -f '{src}/cuda_runtime.h' ]; then " +
            "echo '{src}/cuda_runtime.h is missing: install the CUDA " +
            "toolkit or build without --config=cuda' >&2; exit 1; fi; " +
            "cp -RL '{src}/.' '{out}'"
        ).format(src = src, out = include.path),
        mnemonic = "CopyCudaHeaders",
        progress_message = "Copying the CUDA headers of %s" % src,
        # The copy is large and machine-specific: keep it out of caches.
        execution_requirements = {"no-remote": "1", "no-cache": "1"},
    )
    compilation_context = cc_common.create_compilation_context(
        headers = depset([include]),
        system_includes = depset([include.path]),
    )
    return [
        DefaultInfo(files = depset([include])),
        CcInfo(compilation_context = compilation_context),
    ]

cuda_headers = rule(
    implementation = _cuda_headers_impl,
    attrs = {
        "cuda_path": attr.string(default = CUDA_PATH),
    },
    provides = [CcInfo],
)
