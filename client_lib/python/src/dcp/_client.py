"""dcp.Client, its steps and tasks: client_lib/client.h's Client in Python
(see the package docstring for the loop)."""

import math
import operator
import sys
import threading
import time

import grpc

from dcp import _agent
from dcp import _messages as pb
from dcp import _profile
from dcp import _rpc
from dcp._errors import Error, invalid


class _Frozen:
    """Read-only attributes, as the C++ binding's were."""

    __slots__ = ()

    def __setattr__(self, name, value):
        raise AttributeError("%s.%s is read-only" % (type(self).__name__,
                                                     name))

    def _set(self, **fields):
        for name, value in fields.items():
            object.__setattr__(self, name, value)


class Task(_Frozen):
    """One micro-step of a rank: one forward and backward pass over
    ``samples``, packed back to back, on the sequence-parallel group
    ``group_ranks``.

    ``task_index``: its position in the global plan; ``micro_step``: among
    this rank's tasks of the step; ``lengths`` (tokens, truncated to the
    window) and ``loss_weights`` parallel to ``samples`` (the plan's, or
    derived as length / step tokens when it carries none); ``recompute``:
    the fraction of layers that recompute their activations;
    ``rendezvous_prefix``: where the group's members meet (empty for a
    group of one; ``dcp.torch.group(task)`` forms the group); ``ulysses``:
    the group's Ulysses degree u, its ranks running u-way Ulysses inside a
    (p / u)-way ring attention (0: the whole group, no ring).
    """

    __slots__ = ("task_index", "micro_step", "samples", "lengths",
                 "loss_weights", "recompute", "group_ranks",
                 "rendezvous_prefix", "ulysses")

    def __repr__(self):
        return ("dcp.Task(task_index=%d, samples=%d, group of %d, "
                "recompute=%g)" % (self.task_index, len(self.samples),
                                   len(self.group_ranks), self.recompute))


class Step(_Frozen):
    """One global batch as this rank sees it.

    ``step``, ``epoch``; ``total_tokens``: the step's tokens over all ranks;
    ``tasks``: this rank's micro-steps in order (empty when it sits the step
    out: it still joins the gradient sync and reports); ``drained``: the job
    is over, there is no step; ``world_ranks``: the epoch's world, the ranks
    the step's gradient sync sums over (empty when the plan does not say:
    every rank of the job); ``abandoned_from``: set (else -1) in the steps
    of an epoch a shrink began, the first abandoned step (see
    ``Client.next_epoch``); ``plan``: the step as the scheduler sent it, a
    serialized dcp.v1.RankStep (proto/plan.proto), for logs and tools.
    """

    __slots__ = ("step", "epoch", "total_tokens", "tasks", "drained",
                 "world_ranks", "abandoned_from", "plan")

    def __repr__(self):
        if self.drained:
            return "dcp.Step(drained)"
        return "dcp.Step(step=%d, epoch=%d, tasks=%d)" % (
            self.step, self.epoch, len(self.tasks))


def _seconds(value, what):
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        raise invalid("%s must be a positive number of seconds, got %r"
                      % (what, value)) from None
    if not seconds > 0:
        raise invalid("%s must be a positive number of seconds, got %g"
                      % (what, seconds))
    return seconds


def _integer(value, what):
    if isinstance(value, bool):
        raise invalid("%s must be an integer, got %r" % (what, value))
    try:
        return operator.index(value)
    except TypeError:
        raise invalid("%s must be an integer, got %r" % (what, value)) \
            from None


def _drained_step(last_step):
    step = Step()
    step._set(step=last_step, epoch=0, total_tokens=0, tasks=[], drained=True,
              world_ranks=[], abandoned_from=-1, plan=b"")
    return step


def _resolve(plan):
    """The Step of a RankStep: its tasks, their groups' prefixes and loss
    weights. INVALID_ARGUMENT for a task whose group is not in the plan."""
    prefixes = {g.id: g.rendezvous_prefix for g in plan.groups}
    tasks = []
    for m, t in enumerate(plan.tasks):
        ranks = list(t.ranks)
        prefix = ""
        if len(ranks) >= 2:
            if t.group_id not in prefixes:
                raise invalid("step %d task %d: its group %d is not in the "
                              "plan" % (plan.step, t.task_index, t.group_id))
            prefix = prefixes[t.group_id]
        lengths = list(t.lengths)
        weights = list(t.loss_weights)
        if not weights and plan.total_tokens > 0:
            # As train/trainer.cc derives them.
            weights = [n / plan.total_tokens for n in lengths]
        task = Task()
        task._set(task_index=t.task_index, micro_step=m,
                  samples=list(t.samples), lengths=lengths,
                  loss_weights=weights, recompute=t.recompute,
                  group_ranks=ranks, rendezvous_prefix=prefix,
                  ulysses=t.ulysses)
        tasks.append(task)
    step = Step()
    step._set(step=plan.step, epoch=plan.epoch,
              total_tokens=plan.total_tokens, tasks=tasks, drained=False,
              world_ranks=list(plan.world_ranks),
              abandoned_from=(plan.abandoned_from
                              if plan.HasField("abandoned_from") else -1),
              plan=plan.SerializeToString())
    return step


class _InProcess:
    """The agent in this process: registration, the plan stream's thread,
    the mailbox, the reports."""

    def __init__(self, scheduler, rank, world_size, connect_timeout,
                 rpc_timeout, security, max_reconnect_attempts, max_outage,
                 wants_profile, prefetch_depth=4):
        self.rank = rank
        self._rpc_timeout = rpc_timeout
        self._security = security
        self._cancelled = threading.Event()
        self._channel, self._metadata = _rpc.scheduler_channel(scheduler,
                                                               security)
        try:
            self._stub = _rpc.SchedulerStub(self._channel)
            self._registration = _agent.Registration(
                self._stub, self._metadata, scheduler, rank, world_size)
            self._mailbox = _agent.StepMailbox(rank, prefetch_depth,
                                               wants_profile)
            try:
                hello = self._registration.register(connect_timeout,
                                                    wait_for_ready=True)
            except Error as e:
                raise security.connection_hint(e) from None
            self._registration.accept(hello)
            self._reader = _agent.PlanReader(
                self._stub, self._metadata, self._registration, self._mailbox,
                rank, max_reconnect_attempts, max_outage, rpc_timeout)
            self._reader.start(hello.next_step)
        except BaseException:
            self._channel.close()
            raise

    @property
    def session_id(self):
        return self._registration.first.session_id

    def fetch(self, after_step, timeout):
        return self._mailbox.next_step(after_step, timeout)

    def report(self, message):
        _agent.report(self._stub, self._metadata, self._registration, message,
                      self._rpc_timeout, self._cancelled)

    def report_profile(self, message):
        try:
            self._stub.ReportProfile(message, timeout=self._rpc_timeout,
                                     metadata=self._metadata)
        except grpc.RpcError as e:
            raise _rpc.from_rpc_error(e) from None

    def close(self):
        self._cancelled.set()
        self._registration.abandon()
        self._mailbox.close()
        self._reader.cancel()
        # Its call and back-off end at once; the bound is for a stuck gRPC
        # (a daemon thread does not hold the interpreter's exit).
        self._reader.join(self._rpc_timeout)
        self._channel.close()


class _Sidecar:
    """A dcp-agent --mode=serve beside this process, over its Unix
    socket."""

    def __init__(self, agent_socket, rank, rpc_timeout):
        path = agent_socket[len("unix:"):] if agent_socket.startswith(
            "unix:") else agent_socket
        if not path:
            raise invalid("client options: sidecar mode needs agent_socket")
        if rank < 0:
            raise invalid("client options: sidecar mode needs the agent's "
                          "rank")
        self.rank = rank
        self.session_id = ""
        self._rpc_timeout = rpc_timeout
        self._cancelled = threading.Event()
        self._channel = grpc.insecure_channel("unix:" + path)
        try:
            grpc.channel_ready_future(self._channel).result(
                timeout=rpc_timeout)
        except grpc.FutureTimeoutError:
            self._channel.close()
            raise Error("UNAVAILABLE", "no dcp-agent answers on '%s' (is "
                        "`dcp-agent --mode=serve --socket=%s` running?)"
                        % (path, path)) from None
        self._stub = _rpc.AgentStub(self._channel)

    def fetch(self, after_step, timeout):
        try:
            response = self._stub.NextStep(
                pb.NextStepRequest(after_step=after_step), timeout=timeout)
        except grpc.RpcError as e:
            raise _rpc.from_rpc_error(e) from None
        return response.drained, response.step

    def report(self, message):
        # The agent makes one attempt at the scheduler; a lost connection to
        # the agent is retried here (a report that did arrive is not
        # counted twice).
        backoff = 0.1
        for attempt in range(4):
            if attempt > 0:
                if self._cancelled.wait(backoff):
                    raise _agent.shut_down_error()
                backoff *= 2
            try:
                self._stub.ReportTimings(message, timeout=self._rpc_timeout)
                return
            except grpc.RpcError as e:
                error = _rpc.from_rpc_error(e)
            if error.code != "UNAVAILABLE":
                break
        raise error

    def close(self):
        self._cancelled.set()
        self._channel.close()


class Client:
    """One rank's view of a dcp job.

    In-process (``scheduler="HOST:PORT"``): this process registers rank
    ``rank`` of ``world_size`` (0 accepts the scheduler's) and reads its
    plans on a background thread. Sidecar (``agent_socket=PATH``): a
    ``dcp-agent --mode=serve --socket=PATH`` beside the trainer serves rank
    ``rank``.

    Every call raises ``dcp.Error`` (a RuntimeError carrying the status
    text, ``.code`` its code) when it fails: INVALID_ARGUMENT for bad
    options or a rank the scheduler refuses, a scheduler that cannot be
    reached within ``connect_timeout``, a step that does not come within
    ``step_timeout`` seconds, a report the scheduler refuses. When the
    scheduler goes away mid-job the plan stream reconnects (back-off up to
    5 s) and resumes where it was: a scheduler restarted on its
    ``--state_dir`` continues the job; ``next_step`` raises UNAVAILABLE once
    ``max_reconnect_attempts`` reconnections in a row failed and it has
    been away ``max_outage`` seconds (DEADLINE_EXCEEDED first when
    ``step_timeout`` is shorter), FAILED_PRECONDITION when it came back as
    a new session. Tasks carry no communicator: ``dcp.torch.group(task)``
    forms them.

    In-process, the connection to the scheduler is secured like
    ``dcp-agent``'s (README, "Security"): ``tls_ca`` turns TLS on,
    ``tls_cert``/``tls_key`` add the client certificate of mutual TLS,
    ``auth_token_file`` and ``job_id`` go with every call, and plaintext
    reaches a non-loopback scheduler only with ``insecure=True``. The
    sidecar's Unix socket is local and takes none of them (INVALID_ARGUMENT:
    the dcp-agent holds the scheduler's credentials). ``rpc_timeout``
    bounds each unary call (Register again, ReportTimings; in sidecar mode
    also the wait for the agent's socket).

    In-process, ``profile`` lets the training loop answer the scheduler's
    start-up profile (``dcp-scheduler --profile_at_start``) with its own
    model: a callable that runs one forward and backward of the one-task
    ``dcp.Step`` it is given (``step.step`` is -1) and leaves the weights
    and gradients as they were. When the request comes, ``next_step`` calls
    it for every point of the request's grid this rank measures (the same
    points, in the same order, on every rank: each task's group forms as a
    planned one's does), times each over the request's repetitions and
    reports the medians, before it returns step 0. A request this rank
    cannot run (checked before any point) or a report the scheduler refuses
    is written to stderr and the job goes on: the scheduler plans with what
    it has once its --profile_timeout passes. Without ``profile`` the
    request is ignored. In sidecar mode the dcp-agent answers it
    (INVALID_ARGUMENT).

    Thread-compatible: one training loop calls it.
    """

    def __init__(self, scheduler=None, *, rank, world_size=0,
                 agent_socket=None, step_timeout=600.0, connect_timeout=30.0,
                 rpc_timeout=30.0, tls_ca=None, tls_cert=None, tls_key=None,
                 tls_server_name=None, auth_token_file=None, job_id=None,
                 insecure=False, max_reconnect_attempts=8, max_outage=600.0,
                 profile=None):
        self._impl = None
        if profile is not None and not callable(profile):
            raise invalid("profile must be a callable taking a dcp.Step, "
                          "not %s" % type(profile).__name__)
        self._profile = profile
        self._step_timeout = _seconds(step_timeout, "step_timeout")
        rpc_timeout = _seconds(rpc_timeout, "rpc_timeout")
        rank = _integer(rank, "rank")
        world_size = _integer(world_size, "world_size")
        security = _rpc.Security(tls_ca, tls_cert, tls_key, tls_server_name,
                                 auth_token_file, job_id, insecure)
        self._last_step = -1
        self._fetched_epoch = -1
        self._drained = False
        if agent_socket:
            if scheduler:
                raise invalid("give scheduler= (the agent runs in this "
                              "process) or agent_socket= (a dcp-agent beside "
                              "it), not both")
            if security.any_set():
                raise invalid("agent_socket= takes no TLS, token or job "
                              "options: the Unix socket is local, and the "
                              "dcp-agent holds the scheduler's credentials")
            if profile is not None:
                raise invalid("agent_socket= takes no profile: the dcp-agent "
                              "answers the scheduler's profile itself")
            self._impl = _Sidecar(str(agent_socket), rank, rpc_timeout)
            return
        if not scheduler:
            raise invalid("dcp.Client needs scheduler=\"HOST:PORT\" or "
                          "agent_socket=PATH")
        connect_timeout = _seconds(connect_timeout, "connect_timeout")
        max_reconnect_attempts = _integer(max_reconnect_attempts,
                                          "max_reconnect_attempts")
        try:
            max_outage = float(max_outage)
        except (TypeError, ValueError):
            max_outage = float("nan")
        if rank < 0:
            raise invalid("agent options: rank must be >= 0, not %d" % rank)
        if world_size < 0:
            raise invalid("agent options: world_size must be >= 0 (0 = any)")
        if world_size > 0 and rank >= world_size:
            raise invalid("agent options: rank %d is outside the world of %d"
                          % (rank, world_size))
        if max_reconnect_attempts < 0:
            raise invalid("agent options: max_reconnect_attempts must be "
                          ">= 0")
        if not max_outage >= 0:
            raise invalid("agent options: max_outage must be >= 0 seconds")
        self._impl = _InProcess(str(scheduler), rank, world_size,
                                connect_timeout, rpc_timeout, security,
                                max_reconnect_attempts, max_outage,
                                profile is not None)

    def _live(self):
        if self._impl is None:
            raise Error("FAILED_PRECONDITION", "the dcp client is closed")
        return self._impl

    def _fetch(self, timeout):
        impl = self._live()
        if self._drained:
            # The end stays the end, also once a sidecar agent exited.
            return True, None
        drained, plan = impl.fetch(self._last_step, timeout)
        if isinstance(plan, pb.ProfileRequest):
            self._answer_profile(impl, plan)
            # The wait for the step starts again: the profile was work.
            drained, plan = impl.fetch(self._last_step, timeout)
        self._drained = drained
        if not drained:
            self._fetched_epoch = max(self._fetched_epoch, plan.epoch)
        return drained, plan

    def _answer_profile(self, impl, request):
        try:
            # Each point's RankStep becomes a Step as a planned one does.
            report = _profile.run(request, impl.rank, self._profile,
                                  resolve=_resolve)
            impl.report_profile(report)
        except Error as e:
            sys.stderr.write("dcp: rank %d: not answering the scheduler's "
                             "profile (it plans without this rank's once its "
                             "--profile_timeout passes): %s\n"
                             % (impl.rank, e))

    def _take(self, drained, plan):
        if drained:
            return _drained_step(self._last_step)
        step = _resolve(plan)
        self._last_step = step.step
        return step

    def next_step(self):
        """The step after the last one returned (waits up to
        ``step_timeout``); ``.drained`` at the end. Asking again after an
        error returns the same step."""
        return self._take(*self._fetch(self._step_timeout))

    def next_epoch(self):
        """What a trainer calls instead of ``next_step`` once a step of
        epoch E (the epoch of the last step fetched) failed because a peer
        is gone: drops the steps of epoch E and earlier not returned yet and
        returns the first step of a later epoch (a scheduler with
        ``--on_rank_failure=shrink`` plans the steps its world did not
        complete again, for the ranks left). The dropped steps and the
        failed one are not to be reported. At the step returned the trainer
        undoes the steps numbered ``abandoned_from`` or higher it applied,
        then the members of ``world_ranks`` agree on one state. Drained
        when the job ended instead; DEADLINE_EXCEEDED when no step of a
        later epoch came within ``step_timeout`` (a job held with
        ``--on_rank_failure=hold`` waits for the rank to come back)."""
        failed_epoch = self._fetched_epoch
        deadline = time.monotonic() + self._step_timeout
        while True:
            try:
                drained, plan = self._fetch(max(deadline - time.monotonic(),
                                                0.0))
            except Error as e:
                raise Error(e.code, "no step of an epoch after %d came (was "
                            "the world shrunk? the scheduler holds a job with "
                            "--on_rank_failure=hold): %s"
                            % (failed_epoch, e.message)) from None
            if drained or plan.epoch > failed_epoch:
                return self._take(drained, plan)
            self._last_step = plan.step  # Its world is broken: never run.

    def steps(self):
        """The job's steps in order, until the scheduler drains it."""
        while True:
            step = self.next_step()
            if step.drained:
                return
            yield step

    def report_step(self, step, task_seconds, sync_seconds=0.0):
        """Reports the seconds of each of ``step.tasks`` (in order, each
        positive) and of the gradient sync that closed the step (0: not
        measured). INVALID_ARGUMENT when the counts differ, a time is not a
        positive number or the sync time is negative."""
        impl = self._live()
        if not isinstance(step, Step):
            raise invalid("report_step takes a dcp.Step from next_step(), "
                          "not %s" % type(step).__name__)
        if step.drained:
            raise invalid("a drained step has nothing to report")
        try:
            seconds = [float(s) for s in task_seconds]
        except (TypeError, ValueError):
            raise invalid("step %d: task_seconds must be numbers, got %r"
                          % (step.step, task_seconds)) from None
        if len(seconds) != len(step.tasks):
            raise invalid("step %d has %d tasks but %d times were given"
                          % (step.step, len(step.tasks), len(seconds)))
        try:
            sync = float(sync_seconds)
        except (TypeError, ValueError):
            sync = float("nan")
        if not (sync >= 0 and math.isfinite(sync)):
            raise invalid("step %d: sync time %r is not a non-negative number "
                          "of seconds" % (step.step, sync_seconds))
        message = pb.TimingReport(epoch=step.epoch, step=step.step,
                                  rank=impl.rank, sync_seconds=sync)
        for task, s in zip(step.tasks, seconds):
            if not (s > 0 and math.isfinite(s)):
                raise invalid("step %d task %d: time %r is not positive"
                              % (step.step, task.task_index, s))
            message.tasks.add(
                task_index=task.task_index, micro_step=task.micro_step,
                group_size=len(task.group_ranks), tokens=sum(task.lengths),
                sample_lengths=task.lengths, recompute=task.recompute,
                seconds=s, ulysses=task.ulysses)
        impl.report(message)

    @property
    def rank(self):
        return self._live().rank

    @property
    def session_id(self):
        """The scheduler's session (empty in sidecar mode)."""
        return self._live().session_id

    def close(self):
        """Stops the plan stream (or drops the sidecar channel). Calls after
        it raise FAILED_PRECONDITION. Idempotent."""
        impl, self._impl = self._impl, None
        if impl is not None:
            impl.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __del__(self):
        try:
            self.close()
        except Exception:  # noqa: BLE001 - at interpreter exit, best effort.
            pass
