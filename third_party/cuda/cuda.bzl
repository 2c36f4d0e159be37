"""The system CUDA toolkit (and NCCL) for targets built with `--config=cuda`:
its headers for C++ code (`cuda_headers`) and nvcc for .cu files
(`cuda_objects`, below).

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

# What `cuda_objects` compiles for: SASS for the H200 (sm_90) plus its PTX,
# which the driver JIT-compiles on newer GPUs.
CUDA_GENCODE = ["-gencode=arch=compute_90,code=[sm_90,compute_90]"]

def _cuda_objects_impl(ctx):
    # The headers of `deps` and `hdrs` are the action's inputs (the sandbox
    # shows nvcc nothing else of the workspace); their include directories
    # become its -I and -isystem flags (nvcc has no -iquote: quote
    # directories become -I).
    contexts = [dep[CcInfo].compilation_context for dep in ctx.attr.deps]
    headers = depset(ctx.files.hdrs, transitive = [c.headers for c in contexts])
    includes = ["-I."]
    for c in contexts:
        includes += ["-I" + d for d in c.includes.to_list()]
        includes += ["-I" + d for d in c.quote_includes.to_list()]
        for d in c.system_includes.to_list():
            includes += ["-isystem", d]
        includes += ["-D" + d for d in c.defines.to_list()]
    objects = []
    for src in ctx.files.srcs:
        obj = ctx.actions.declare_file(
            "_objs/{}/{}.o".format(ctx.label.name, src.basename[:-len(".cu")]),
        )
        ctx.actions.run(
            executable = ctx.attr.cuda_path + "/bin/nvcc",
            arguments = [
                "-c",
                "-std=c++17",
                "-O3",
                "-Xcompiler=-fPIC,-Wall",
            ] + CUDA_GENCODE + includes + ctx.attr.copts + [
                src.path,
                "-o",
                obj.path,
            ],
            inputs = depset([src], transitive = [headers]),
            outputs = [obj],
            # nvcc runs the host compiler (g++) from PATH.
            env = {"PATH": "/usr/local/bin:/usr/bin:/bin"},
            mnemonic = "NvccCompile",
            progress_message = "Compiling %s with nvcc" % src.short_path,
        )
        objects.append(obj)
    return [DefaultInfo(files = depset(objects))]

cuda_objects = rule(
    implementation = _cuda_objects_impl,
    doc = """Compiles .cu files with nvcc into object files for a cc_library.

        load("//third_party/cuda:cuda.bzl", "cuda_objects")

        cuda_objects(
            name = "x_objects",
            srcs = ["x.cu"],
            deps = [":x_header", "@absl"],   # what x.cu includes
            target_compatible_with = ...,    # CUDA builds only
        )
        cc_library(
            name = "x",
            srcs = [":x_objects"],
            hdrs = ["x.h"],
            deps = [":x_header", "//third_party/cuda:cuda_runtime", "@absl"],
        )

    One object per source, position-independent (-Xcompiler=-fPIC) so the
    same object goes into static and shared links, for CUDA_GENCODE, with
    -std=c++17 -O3 whatever the compilation mode (Bazel's --copt and -c do
    not reach nvcc; `copts` does). It links nothing itself: the cc_library
    that takes the objects names the runtime (//third_party/cuda:cuda_runtime)
    and whatever the host code of the .cu calls, since `deps` only lends
    headers here. Limits: no relocatable device code (-rdc), so a kernel and
    the device functions it calls live in one .cu; nvcc and its host
    compiler (g++ on PATH) are the machine's, outside Bazel's view, as for
    `cuda_headers`.
    """,
    attrs = {
        "srcs": attr.label_list(allow_files = [".cu"], mandatory = True),
        "hdrs": attr.label_list(
            allow_files = [".h", ".cuh"],
            doc = "Headers of this package the sources include.",
        ),
        "deps": attr.label_list(
            providers = [CcInfo],
            doc = "C++ libraries whose headers the sources include.",
        ),
        "copts": attr.string_list(doc = "Further nvcc flags."),
        "cuda_path": attr.string(default = CUDA_PATH),
    },
)
