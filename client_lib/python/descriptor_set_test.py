"""The schema the package ships (src/dcp/descriptor_set.pb) is what protoc
makes of //proto now (the genrule //client_lib/python:descriptor_set), the
hand-written stubs of dcp._rpc agree with its services, and the messages
build on both of the runtime's implementations at hand (C++ or upb, and
pure Python).

Run by run_python_test.sh under Bazel:
    descriptor_set_test.py SHIPPED GENERATED
After a change to proto/*.proto, refresh the shipped copy:
    bazel build //client_lib/python:descriptor_set &&
    cp bazel-bin/client_lib/python/descriptor_set_from_proto.pb \\
       client_lib/python/src/dcp/descriptor_set.pb
"""

import os
import subprocess
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from google.protobuf import descriptor_pb2  # noqa: E402

SHIPPED, GENERATED = sys.argv[1:3]
del sys.argv[1:3]


def load(path):
    with open(path, "rb") as f:
        return descriptor_pb2.FileDescriptorSet.FromString(f.read())


class DescriptorSetTest(unittest.TestCase):

    def test_the_shipped_copy_is_protocs_output(self):
        shipped, generated = load(SHIPPED), load(GENERATED)
        self.assertEqual(
            [f.name for f in shipped.file], [f.name for f in generated.file])
        for mine, theirs in zip(shipped.file, generated.file):
            self.assertEqual(
                mine, theirs,
                "src/dcp/descriptor_set.pb is out of date for %s; refresh it "
                "(see this test's docstring)" % theirs.name)

    def test_the_stubs_agree_with_the_services(self):
        from dcp import _rpc
        services = {(f.package, s.name): s for f in load(SHIPPED).file
                    for s in f.service}
        for name, methods in (("Scheduler", _rpc.SCHEDULER_METHODS),
                              ("Agent", _rpc.AGENT_METHODS)):
            service = services[("dcp.v1", name)]
            declared = {m.name: m for m in service.method}
            for method, kind in methods.items():
                self.assertIn(method, declared, name)
                m = declared[method]
                want = {(False, False): _rpc.UNARY,
                        (False, True): _rpc.SERVER_STREAMING}.get(
                            (m.client_streaming, m.server_streaming))
                self.assertEqual(kind, want, "%s.%s" % (name, method))

    def test_the_messages_build_on_each_implementation(self):
        script = (
            "from google.protobuf.internal import api_implementation as a\n"
            "from dcp import _messages as pb, _rpc\n"
            "s = pb.RankStep(step=3, epoch=1, abandoned_from=2)\n"
            "s.tasks.add(samples=[4, 5], lengths=[7, 8], ranks=[0, 1])\n"
            "t = pb.RankStep.FromString(s.SerializeToString())\n"
            "assert t == s and t.HasField('abandoned_from'), t\n"
            "u = pb.PlanUpdate(drain=pb.Drained(last_step=9))\n"
            "assert pb.PlanUpdate.FromString(u.SerializeToString())"
            ".WhichOneof('update') == 'drain'\n"
            "assert pb.message_class('RankStep') is pb.RankStep\n"
            "print(a.Type())\n")
        seen = set()
        for implementation in (None, "python"):
            env = dict(os.environ, PYTHONPATH=HERE)
            env.pop("PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION", None)
            if implementation:
                env["PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION"] = implementation
            done = subprocess.run([sys.executable, "-c", script], env=env,
                                  capture_output=True, text=True, timeout=60)
            self.assertEqual(done.returncode, 0, done.stderr)
            seen.add(done.stdout.strip())
        print("message layer on: %s" % ", ".join(sorted(seen)),
              file=sys.stderr)
        self.assertIn("python", seen)


if __name__ == "__main__":
    unittest.main(verbosity=2)
