"""The in-process agent of dcp's Python client: what worker_agent's Agent
does for a trainer that forms its own groups (client_lib's Python binding
ran it with no communicators), in Python.

- ``Registration``: the Register calls, the first answer (session, world,
  the step to resume from) and the ones after a broken plan stream, which
  must continue the same session.
- ``StepMailbox``: the steps between the plan stream and the training loop,
  newest (epoch, step) only, at most ``capacity`` queued.
- ``PlanReader``: a thread reading StreamPlans into the mailbox; when the
  stream breaks it registers again and resumes after the last step it
  received, with exponential back-off, giving up only once both
  ``max_reconnect_attempts`` failed in a row and the scheduler has been
  unreachable for ``max_outage``; ABORTED (another agent took the rank), a
  refused registration and a restarted scheduler (new session) fail the
  mailbox at once.
- ``report``: ReportTimings with the C++ ReportSender's retries.

Each mirrors the C++ class of the same name (worker_agent/*.h), whose
comments say why; the reports go on unary calls rather than a StreamReports
stream (a stream saves the scheduler CPU at hundreds of ranks; a Python
trainer reports once a step of seconds).
"""

import collections
import os
import socket
import threading
import time

import grpc

from dcp import _messages as pb
from dcp import _rpc
from dcp._errors import Error


def format_duration(seconds):
    """Like absl::FormatDuration: "10s", "1m30s", "250ms", "1h0m0s"."""
    if seconds <= 0:
        return "0"
    if seconds < 1:
        return "%gms" % round(seconds * 1000, 3)
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    secs = round(secs, 3)
    if hours:
        return "%dh%dm%gs" % (hours, minutes, secs)
    if minutes:
        return "%dm%gs" % (minutes, secs) if secs else "%dm" % minutes
    return "%gs" % secs


class Backoff:
    """``initial`` seconds, doubling up to ``maximum`` (common/backoff.h)."""

    def __init__(self, initial, maximum):
        self._initial = initial
        self._maximum = maximum
        self._next = initial

    def next(self):
        now = self._next
        self._next = min(self._next * 2, self._maximum)
        return now

    def reset(self):
        self._next = self._initial


def shut_down_error():
    return Error("UNAVAILABLE", "the agent is shut down")


class Registration:
    """The rank's registrations (worker_agent/registration.h).
    Thread-safe."""

    def __init__(self, stub, metadata, address, rank, world_size):
        self._stub = stub
        self._metadata = metadata
        self._address = address
        self._rank = rank
        self._world_size = world_size
        self._cond = threading.Condition()
        self._count = 0
        self._reconnecting = False
        self._abandoned = False
        self.first = None

    def register(self, timeout, wait_for_ready=False, attach=None):
        """One Register call; ``attach(future)`` lets a canceller reach it
        (False: cancelled already). The error names the rank and the
        scheduler."""
        request = pb.RegisterRequest(
            rank=self._rank, host=socket.gethostname(), gpu=0,
            pid=os.getpid(), world_size=self._world_size)
        future = self._stub.Register.future(
            request, timeout=timeout, metadata=self._metadata,
            wait_for_ready=wait_for_ready)
        if attach is not None and not attach(future):
            future.cancel()
            raise shut_down_error()
        try:
            return future.result()
        except grpc.RpcError as e:
            raise _rpc.from_rpc_error(e, "registering rank %d with '%s': "
                                      % (self._rank, self._address)) from None
        except grpc.FutureCancelledError:
            raise shut_down_error() from None

    def accept(self, response):
        """Takes an answer of ``register``; a later one must carry the first
        one's session (FAILED_PRECONDITION: the scheduler restarted)."""
        with self._cond:
            if self._count == 0:
                self.first = response
            elif response.session_id != self.first.session_id:
                raise Error(
                    "FAILED_PRECONDITION",
                    "the scheduler restarted (session '%s' is now '%s'): its "
                    "plans no longer continue this job's; restart the "
                    "trainers" % (self.first.session_id, response.session_id))
            self._count += 1
            self._reconnecting = False
            self._cond.notify_all()

    def set_reconnecting(self):
        with self._cond:
            self._reconnecting = True
            self._cond.notify_all()

    def abandon(self):
        with self._cond:
            self._abandoned = True
            self._cond.notify_all()

    def count(self):
        with self._cond:
            return self._count

    def reconnecting(self):
        with self._cond:
            return self._reconnecting and not self._abandoned

    def await_registered_again(self, seen, timeout):
        """Waits until a registration after the first ``seen`` was accepted,
        none is under way, the reader gave up or ``timeout`` passed; whether
        one was accepted."""
        with self._cond:
            self._cond.wait_for(
                lambda: (not self._reconnecting or self._count != seen or
                         self._abandoned), timeout)
            return self._count != seen


class StepMailbox:
    """The steps between the reader and the training loop
    (worker_agent/step_mailbox.h). Thread-safe; one producer."""

    def __init__(self, rank, capacity, wants_profile=False):
        self._rank = rank
        self._capacity = capacity
        self._wants_profile = wants_profile
        self._profile = None  # A ProfileRequest not yet taken.
        self._profile_taken = False
        self._cond = threading.Condition()
        self._queue = collections.deque()
        self._last = (-1, -1)  # The newest (epoch, step) put.
        self._delivered = None
        self._drained = False
        self._failure = None
        self._closed = False

    def await_room(self):
        """Blocks until fewer than ``capacity`` steps are queued; False once
        closed."""
        with self._cond:
            self._cond.wait_for(
                lambda: self._closed or len(self._queue) < self._capacity)
            return not self._closed

    def put(self, step):
        """Queues a RankStep newer than the last; False (dropped)
        otherwise."""
        with self._cond:
            if (step.epoch, step.step) <= self._last:
                return False
            self._last = (step.epoch, step.step)
            self._queue.append(step)
            self._cond.notify_all()
            return True

    def put_profile(self, request):
        """Holds the scheduler's ProfileRequest for the training loop, the
        first one only (the stream sends it again after a reconnection
        while the stage waits); dropped unless the loop answers profiles."""
        with self._cond:
            if not self._wants_profile or self._profile_taken:
                return
            self._profile = request
            self._cond.notify_all()

    def drain(self):
        with self._cond:
            self._drained = True
            self._cond.notify_all()

    def fail(self, error):
        """The stream failed for good: consumers get ``error`` once the
        queue is empty. The first failure wins."""
        with self._cond:
            if self._failure is None:
                self._failure = error
            self._cond.notify_all()

    def drained(self):
        with self._cond:
            return self._drained

    def last_step(self):
        with self._cond:
            return self._last[1]

    def close(self):
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    def _answerable(self, after_step):
        if self._closed or self._drained or self._failure is not None:
            return True
        if self._profile is not None:
            return True
        if self._delivered is not None and self._delivered.step > after_step:
            return True
        return bool(self._queue) and self._queue[-1].step > after_step

    def _take(self, after_step):
        """(drained, step) for ``after_step`` if known now; raises the
        failure; None when nothing is known yet."""
        if self._closed:
            raise shut_down_error()
        if self._profile is not None:
            request, self._profile = self._profile, None
            self._profile_taken = True
            return False, request
        while self._queue and self._queue[0].step <= after_step:
            self._queue.popleft()
            self._cond.notify_all()
        if self._delivered is not None and self._delivered.step > after_step:
            return False, self._delivered  # Asked again: the same answer.
        if self._queue:
            self._delivered = self._queue.popleft()
            self._cond.notify_all()
            return False, self._delivered
        if self._drained:
            return True, None
        if self._failure is not None:
            raise self._failure
        return None

    def next_step(self, after_step, timeout):
        """The first step after ``after_step`` as (drained, RankStep),
        waiting up to ``timeout`` seconds (DEADLINE_EXCEEDED); a
        ProfileRequest held by ``put_profile`` comes first, once, as
        (False, ProfileRequest)."""
        with self._cond:
            self._cond.wait_for(lambda: self._answerable(after_step),
                                max(timeout, 0))
            answer = self._take(after_step)
        if answer is None:
            raise Error("DEADLINE_EXCEEDED",
                        "rank %d: no step after %d arrived within %s"
                        % (self._rank, after_step, format_duration(timeout)))
        return answer


class PlanReader:
    """The plan stream's thread (worker_agent/plan_reader.h). ``cancel``
    ends the call under way and any back-off."""

    def __init__(self, stub, metadata, registration, mailbox, rank,
                 max_reconnect_attempts, max_outage, rpc_timeout,
                 initial_backoff=0.1, max_backoff=5.0):
        self._stub = stub
        self._metadata = metadata
        self._registration = registration
        self._mailbox = mailbox
        self._rank = rank
        self._max_reconnect_attempts = max_reconnect_attempts
        self._max_outage = max_outage
        self._rpc_timeout = rpc_timeout
        self._initial_backoff = initial_backoff
        self._max_backoff = max_backoff
        self._lock = threading.Lock()
        self._cancelled = threading.Event()
        self._call = None  # The call under way, to cancel it.
        self.reconnects = 0
        self._thread = None

    def start(self, from_step):
        self._thread = threading.Thread(
            target=self._loop, args=(from_step,), daemon=True,
            name="dcp-plan-reader-%d" % self._rank)
        self._thread.start()

    def cancel(self):
        with self._lock:
            self._cancelled.set()
            call = self._call
        if call is not None:
            call.cancel()

    def join(self, timeout=None):
        if self._thread is not None and \
                self._thread is not threading.current_thread():
            self._thread.join(timeout)

    def _attach(self, call):
        with self._lock:
            if self._cancelled.is_set():
                return False
            self._call = call
            return True

    def _detach(self):
        with self._lock:
            self._call = None

    def _give_up(self, error):
        self._mailbox.fail(error)
        self._registration.abandon()

    def _loop(self, from_step):
        failures = [0]
        backoff = Backoff(self._initial_backoff, self._max_backoff)
        broke = None  # When the scheduler was last known reachable.
        while True:
            error, got_message = self._read_stream(from_step)
            if self._cancelled.is_set() or self._mailbox.drained():
                return
            if got_message:
                failures[0] = 0
                backoff.reset()
                broke = None
            if broke is None:
                broke = time.monotonic()
            if error is not None and error.code == "ABORTED":
                self._give_up(Error(
                    "FAILED_PRECONDITION",
                    "the plan stream of rank %d was taken over (another agent "
                    "registered the rank?): %s" % (self._rank, error.message)))
                return
            if error is not None and error.code == "INVALID_ARGUMENT":
                self._give_up(error)
                return
            self._registration.set_reconnecting()
            if error is None:
                error = Error("UNAVAILABLE",
                              "the plan stream ended without a drain marker")
            resume = self._reconnect(error, failures, backoff, broke)
            if resume is None:
                return
            from_step = resume

    def _reconnect(self, last, failures, backoff, broke):
        while True:
            outage = time.monotonic() - broke
            failures[0] += 1
            if (failures[0] > self._max_reconnect_attempts and
                    outage >= self._max_outage):
                self._give_up(Error(
                    "UNAVAILABLE",
                    "the plan stream of rank %d is lost (%s); gave up after "
                    "%d reconnection attempts over %s (max_outage %s)"
                    % (self._rank, last, failures[0] - 1,
                       format_duration(outage),
                       format_duration(self._max_outage))))
                return None
            if self._cancelled.wait(backoff.next()):
                return None
            try:
                again = self._registration.register(self._rpc_timeout,
                                                    attach=self._attach)
            except Error as e:
                self._detach()
                if self._cancelled.is_set():
                    return None
                if e.code == "INVALID_ARGUMENT":
                    self._give_up(e)
                    return None
                last = e
                continue
            self._detach()
            try:
                self._registration.accept(again)
            except Error as e:
                self._give_up(e)
                return None
            self.reconnects += 1
            return max(again.next_step, self._mailbox.last_step() + 1)

    def _read_stream(self, from_step):
        """Reads one stream until it ends: (its error or None when it ended
        OK, whether any message arrived)."""
        request = pb.StreamPlansRequest(
            rank=self._rank, session_id=self._registration.first.session_id,
            from_step=from_step)
        call = self._stub.StreamPlans(request, metadata=self._metadata)
        got_message = False
        if not self._attach(call):
            call.cancel()
            return shut_down_error(), False
        try:
            # A full mailbox holds the next read back.
            while self._mailbox.await_room():
                update = next(call)
                got_message = True
                self._dispatch(update)
            call.cancel()
            return shut_down_error(), got_message
        except StopIteration:
            return None, got_message
        except grpc.RpcError as e:
            return _rpc.from_rpc_error(e), got_message
        finally:
            self._detach()

    def _dispatch(self, update):
        which = update.WhichOneof("update")
        if which == "step":
            step = pb.RankStep()
            step.CopyFrom(update.step)
            self._mailbox.put(step)
        elif which == "drain":
            self._mailbox.drain()
        elif which == "profile":
            # Answered by the training loop when it runs profiles; ignored
            # otherwise, as by an agent without a profile runner: the
            # scheduler then plans without this rank's profile.
            request = pb.ProfileRequest()
            request.CopyFrom(update.profile)
            self._mailbox.put_profile(request)


def report(stub, metadata, registration, report_message, rpc_timeout,
           cancelled, initial_backoff=0.1, max_backoff=5.0):
    """Sends one TimingReport with ReportSender::ReportUnary's retries:
    UNAVAILABLE and DEADLINE_EXCEEDED a few times, and for as long as the
    plan stream is reconnecting; FAILED_PRECONDITION once the rank has
    registered again (a scheduler that came back does not know the rank
    before). ALREADY_EXISTS (a retry after a lost answer) is success.
    ``cancelled`` is a threading.Event that ends the back-offs."""
    backoff = Backoff(initial_backoff, max_backoff)
    attempts = 5
    registered_again = False
    error = None
    attempt = 0
    while True:
        if attempt >= attempts and not registered_again and \
                not registration.reconnecting():
            break
        sleep = backoff.next()
        if cancelled.is_set():
            raise shut_down_error()
        if attempt > 0 and not registered_again:
            if cancelled.wait(sleep):
                raise shut_down_error()
        attempt += 1
        registered_again = False
        registrations = registration.count()
        try:
            stub.ReportTimings(report_message, timeout=rpc_timeout,
                               metadata=metadata)
            return
        except grpc.RpcError as e:
            error = _rpc.from_rpc_error(e)
        if error.code == "ALREADY_EXISTS":
            return
        if error.code == "FAILED_PRECONDITION":
            if not registration.await_registered_again(registrations,
                                                       rpc_timeout):
                break
            registered_again = True
            continue
        if error.code not in ("UNAVAILABLE", "DEADLINE_EXCEEDED"):
            break
    raise Error(error.code, "reporting timings of step %d: %s"
                % (report_message.step, error.message))
