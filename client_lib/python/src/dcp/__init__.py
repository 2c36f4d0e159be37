"""dcp for Python training loops: plans from a dcp-scheduler, per step.

    import dcp
    client = dcp.Client(scheduler="10.0.0.1:50051", rank=rank, world_size=world)
    for step in client.steps():
        seconds = []
        for task in step.tasks:          # this rank's micro-steps, in order
            ...                          # forward + backward of task.samples
            seconds.append(elapsed)
        ...                              # the gradient all-reduce, optimizer
        client.report_step(step, seconds)

Plain Python over grpcio and protobuf (any CPython >= 3.9; protobuf 3.20 to
6.x): ``pip install ./client_lib/python``, or Bazel's
``//client_lib/python:dcp`` on PYTHONPATH. The messages are built at import
from the schema shipped in the package (dcp._messages); the client speaks
the same RPCs as client_lib/client.h's, in process (dcp._agent) or to a
``dcp-agent --mode=serve`` beside the trainer. ``dcp.torch`` forms each
task's torch.distributed groups (Ulysses, and a ring around Ulysses
subgroups) and holds the Ulysses exchange, ring attention, the recompute
helper and the packed loss; ``dcp.SyntheticCorpus`` is
train/corpus.h's corpus, token for token.
"""

from dcp._corpus import SyntheticCorpus
from dcp._errors import Error

__all__ = ["Client", "Error", "Step", "SyntheticCorpus", "Task"]


def __getattr__(name):
    # The client's names import grpcio and protobuf on first use, so that
    # dcp.torch and dcp.SyntheticCorpus also load where they are missing.
    if name in ("Client", "Step", "Task"):
        from dcp import _client
        return getattr(_client, name)
    raise AttributeError("module 'dcp' has no attribute %r" % name)


def __dir__():
    return sorted(set(globals()) | {"Client", "Step", "Task"})
