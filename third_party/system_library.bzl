"""A repository rule that exposes a system library found by pkg-config.

`system_library(name = "grpc", modules = ["grpc++"])` creates `@grpc//:grpc`, a
cc_library whose link options and defines come from `pkg-config`. Include
directories outside the compiler's default search path are symlinked into the
repository so that Bazel's `includes` attribute can name them.
"""

def _pkg_config(ctx, args):
    result = ctx.execute(["pkg-config"] + args)
    if result.return_code != 0:
        fail("pkg-config %s failed: %s\nRun tools/setup.sh to install the " % (
            " ".join(args),
            result.stderr,
        ) + "Debian packages dcp builds against.")
    return result.stdout.strip().split(" ") if result.stdout.strip() else []

def _system_library_impl(ctx):
    modules = ctx.attr.modules

    # Libraries without a pkg-config file (e.g. Debian's libgloo) name their
    # link options directly and a header that proves they are installed.
    for header in ctx.attr.required_headers:
        if not ctx.path(header).exists:
            fail("%s is missing: run tools/setup.sh to install the Debian " % header +
                 "packages dcp builds against.")
    cflags = _pkg_config(ctx, ["--cflags"] + modules) if modules else []
    libs = _pkg_config(ctx, ["--libs"] + modules) if modules else []

    defines = []
    includes = []
    hdr_globs = []
    for flag in cflags:
        if flag.startswith("-D"):
            defines.append(flag[2:])
        elif flag.startswith("-I"):
            path = flag[2:]
            if path in ("/usr/include", "/usr/local/include"):
                continue
            local = "include_%d" % len(includes)
            ctx.symlink(path, local)
            includes.append(local)
            hdr_globs.append(local + "/**")

    # Include folders and defines of libraries without a pkg-config file.
    for path in ctx.attr.extra_includes:
        local = "include_%d" % len(includes)
        ctx.symlink(path, local)
        includes.append(local)
        hdr_globs.append(local + "/**")
    defines += ctx.attr.extra_defines

    linkopts = [lib for lib in libs if lib]
    linkopts += ctx.attr.extra_linkopts

    ctx.file("WORKSPACE", "workspace(name = \"%s\")\n" % ctx.name)
    ctx.file("BUILD.bazel", """
cc_library(
    name = "{name}",
    hdrs = glob({globs}, allow_empty = True),
    includes = {includes},
    defines = {defines},
    linkopts = {linkopts},
    visibility = ["//visibility:public"],
)
""".format(
        name = ctx.name,
        globs = repr(hdr_globs),
        includes = repr(includes),
        defines = repr(defines),
        linkopts = repr(linkopts),
    ))

system_library = repository_rule(
    implementation = _system_library_impl,
    attrs = {
        "modules": attr.string_list(default = []),
        "required_headers": attr.string_list(default = []),
        "extra_linkopts": attr.string_list(default = []),
        "extra_includes": attr.string_list(default = []),
        "extra_defines": attr.string_list(default = []),
    },
    environ = ["PKG_CONFIG_PATH"],
    local = True,
)
