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

`dcp.torch` forms each task's torch.distributed group and holds the Ulysses
exchange, the recompute helper and the packed loss. The client itself is the
C++ client library (`client_lib/client.h`) in the extension `dcp._dcp`, built
by `bazel build //client_lib/python:dcp`; `dcp.torch` is plain Python and
imports without it.
"""

try:
    from dcp import _dcp
except ImportError as _error:  # dcp.torch alone still works.
    _dcp = None
    _import_error = _error
else:
    Error = _dcp.Error
    Step = _dcp.Step
    Task = _dcp.Task
    SyntheticCorpus = _dcp.SyntheticCorpus


class Client:
    """One rank's view of a dcp job.

    In-process (``scheduler="HOST:PORT"``): the dcp agent runs inside this
    process and registers rank ``rank`` of ``world_size`` (0 accepts the
    scheduler's world). Sidecar (``agent_socket=PATH``): a ``dcp-agent
    --mode=serve --socket=PATH`` beside the trainer serves rank ``rank``.

    Every call raises ``dcp.Error`` (a RuntimeError carrying the status text,
    ``.code`` its code) when it fails: a scheduler that cannot be reached
    within ``connect_timeout``, a step that does not come within
    ``step_timeout`` seconds (a dropped scheduler fails sooner, once the
    agent's reconnections are used up), a report the scheduler refuses.
    Tasks carry no communicator: ``dcp.torch.group(task)`` forms them.

    In-process, the connection to the scheduler is secured like
    ``dcp-agent``'s (README, "Security"): ``tls_ca`` turns TLS on,
    ``tls_cert``/``tls_key`` add the client certificate of mutual TLS,
    ``auth_token_file`` and ``job_id`` go with every call, and plaintext
    reaches a non-loopback scheduler only with ``insecure=True``. The
    sidecar's Unix socket is local and takes none of them.
    """

    def __init__(self, scheduler=None, *, rank, world_size=0,
                 agent_socket=None, step_timeout=600.0, connect_timeout=30.0,
                 rpc_timeout=30.0, tls_ca=None, tls_cert=None, tls_key=None,
                 tls_server_name=None, auth_token_file=None, job_id=None,
                 insecure=False):
        if _dcp is None:
            raise ImportError(
                "dcp's extension dcp._dcp is not importable (build it with "
                "`bazel build //client_lib/python:dcp` and put "
                "bazel-bin/client_lib/python on PYTHONPATH): %s"
                % _import_error)
        security = _dcp.SecurityOptions()
        security.tls_ca = tls_ca or ""
        security.tls_cert = tls_cert or ""
        security.tls_key = tls_key or ""
        security.tls_server_name = tls_server_name or ""
        security.auth_token_file = auth_token_file or ""
        security.job_id = job_id or ""
        security.insecure = bool(insecure)
        self._client = _dcp.Client(scheduler or "", rank, world_size,
                                   agent_socket or "", step_timeout,
                                   connect_timeout, rpc_timeout, security)

    def next_step(self):
        """The step after the last one returned; ``.drained`` at the end."""
        return self._client.next_step()

    def steps(self):
        """The job's steps in order, until the scheduler drains it."""
        while True:
            step = self._client.next_step()
            if step.drained:
                return
            yield step

    def report_step(self, step, task_seconds, sync_seconds=0.0):
        """Reports the seconds of each of ``step.tasks`` (in order, each
        positive) and of the gradient sync that closed the step (0: not
        measured)."""
        self._client.report_step(step, list(task_seconds), sync_seconds)

    @property
    def rank(self):
        return self._client.rank

    @property
    def session_id(self):
        """The scheduler's session (empty in sidecar mode)."""
        return self._client.session_id

    def close(self):
        """Stops the in-process agent (or drops the sidecar channel)."""
        self._client.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False
