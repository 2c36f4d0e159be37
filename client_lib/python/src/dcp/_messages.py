"""dcp's wire messages (package dcp.v1 of proto/*.proto), built at import
time from the serialized FileDescriptorSet shipped beside this module.

Why not generated ``*_pb2.py``: generated code is tied to the protoc that
wrote it (a protoc 3.21 ``_pb2`` warns or refuses under some later runtimes,
and a new one does not load on an old runtime), while the calls used here
(``DescriptorPool.AddSerializedFile``, ``FindMessageTypeByName`` and
``message_factory.GetMessageClass``, or ``MessageFactory.GetPrototype``
before protobuf 4.22) are in every runtime from 3.20 to 6.x, on the upb, C++
and pure-Python implementations alike. The messages live in a private pool,
so a process that also imports generated dcp.v1 code does not clash.

``descriptor_set.pb`` is ``protoc --include_imports --descriptor_set_out``
of proto/plan.proto, proto/scheduler_service.proto and
proto/agent_service.proto, in that order; Bazel's
``//client_lib/python:descriptor_set`` makes it from //proto, and
``//client_lib/python:descriptor_set_test`` checks that the copy here is
that output.

    from dcp import _messages as pb
    request = pb.RegisterRequest(rank=0)
    pb.RegisterRequest.FromString(request.SerializeToString())
"""

import os

from google.protobuf import descriptor_pb2
from google.protobuf import descriptor_pool
from google.protobuf import message_factory

PACKAGE = "dcp.v1"
DESCRIPTOR_SET = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                              "descriptor_set.pb")

# The messages the client uses, by their names in package dcp.v1.
_NAMES = (
    # proto/plan.proto
    "Task", "CommGroup", "RankStep", "TaskTiming", "TimingReport",
    "ProfileEntry", "Profile",
    # proto/scheduler_service.proto
    "RegisterRequest", "RegisterResponse", "StreamPlansRequest",
    "PlanUpdate", "Drained", "ReportAck", "StatusRequest", "StatusResponse",
    "DrainRequest", "DrainResponse", "ProfileRequest", "ProfileReport",
    # proto/agent_service.proto
    "NextStepRequest", "NextStepResponse", "AgentAck",
)


def _load_pool(path):
    with open(path, "rb") as f:
        files = descriptor_pb2.FileDescriptorSet.FromString(f.read())
    pool = descriptor_pool.DescriptorPool()
    for file_proto in files.file:  # Imports come first (--include_imports).
        pool.AddSerializedFile(file_proto.SerializeToString())
    return pool


def _message_class(descriptor):
    get = getattr(message_factory, "GetMessageClass", None)
    if get is not None:  # protobuf >= 4.22
        return get(descriptor)
    # protobuf 3.20 .. 4.21; one factory per pool keeps classes unique.
    return _FACTORY.GetPrototype(descriptor)


POOL = _load_pool(DESCRIPTOR_SET)
if not hasattr(message_factory, "GetMessageClass"):
    _FACTORY = message_factory.MessageFactory(POOL)


def message_class(name):
    """The class of message ``dcp.v1.<name>``; KeyError when the shipped
    schema has no such message."""
    return _message_class(POOL.FindMessageTypeByName("%s.%s" % (PACKAGE,
                                                                name)))


def service(name):
    """The ServiceDescriptor of ``dcp.v1.<name>``."""
    return POOL.FindServiceByName("%s.%s" % (PACKAGE, name))


for _name in _NAMES:
    globals()[_name] = message_class(_name)
del _name
