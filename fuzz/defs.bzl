"""`dcp_fuzz_test`: a libFuzzer target that is also a corpus regression test.

    load("//fuzz:defs.bzl", "dcp_fuzz_test")

    dcp_fuzz_test(
        name = "text_reader_fuzzer",
        srcs = ["text_reader_fuzzer.cc"],  # defines LLVMFuzzerTestOneInput
        deps = [":length_source_fuzz"],
    )

makes a cc_test that runs `LLVMFuzzerTestOneInput` once on every file of
`corpus/<name>/` (fuzz_test_main.cc), built by Bazel with the default
toolchain like every other test. tools/fuzz.sh finds these targets by their
`fuzz_target` tag and builds the same sources with clang and libFuzzer
instead of fuzz_test_main.cc, seeded with the same corpus; a `<name>.options`
file beside the BUILD file holds extra libFuzzer flags, one a line, and
`<name>.dict` a libFuzzer dictionary.
"""

load("@rules_cc//cc:defs.bzl", "cc_test")

def dcp_fuzz_test(name, srcs, deps = [], **kwargs):
    """A fuzz target and its corpus regression test.

    Args:
      name: the target; its seed corpus is `corpus/<name>/`.
      srcs: sources, one of them defining LLVMFuzzerTestOneInput.
      deps: libraries the sources use.
      **kwargs: passed to cc_test (size, tags are set here).
    """
    cc_test(
        name = name,
        size = "small",
        srcs = srcs,
        args = ["fuzz/corpus/" + name],
        data = native.glob(["corpus/%s/**" % name]),
        tags = ["fuzz_target"],
        deps = deps + ["//fuzz:fuzz_test_main"],
        **kwargs
    )
