"""The cross-process tests of a whole job."""

load("@rules_cc//cc:defs.bzl", "cc_test")

# What every such test starts from its runfiles.
JOB_BINARIES = [
    "//scheduler/server:dcp-ctl",
    "//scheduler/server:dcp-scheduler",
    "//worker_agent:dcp-agent",
]

# What every such test links: the child-process helpers and what they use.
JOB_TEST_DEPS = [
    ":child_process",
    "@absl",
    "@gtest_main",
    "@nlohmann_json",
]

def job_test(name, data = [], deps = [], **kwargs):
    """A cc_test with the job's binaries as data and the helpers as deps.

    Args:
      name: the test's name.
      data: what the test needs besides JOB_BINARIES.
      deps: what it links besides JOB_TEST_DEPS.
      **kwargs: cc_test's other attributes.
    """
    cc_test(
        name = name,
        data = JOB_BINARIES + data,
        deps = JOB_TEST_DEPS + deps,
        **kwargs
    )
