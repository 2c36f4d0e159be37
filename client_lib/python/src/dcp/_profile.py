"""The scheduler's start-up profile run by the training loop itself: the
points of a ProfileRequest (common/profile_point.h, one rule with the C++
agents and the scheduler) as single-task dcp.Steps, each timed over the
request's repetitions, and the ProfileReport of a rank."""

import statistics
import time

from dcp import _messages as pb
from dcp._errors import invalid


def shapes(request):
    """The request's shapes in order: (group size p, Ulysses degree u), u =
    p when the request gives no degrees. INVALID_ARGUMENT naming the shape
    when the degrees are neither absent nor one per size, or a degree does
    not divide its size."""
    sizes, degrees = list(request.group_sizes), list(request.ulysses)
    if degrees and len(degrees) != len(sizes):
        raise invalid("profile request: %d Ulysses degrees for %d group "
                      "sizes" % (len(degrees), len(sizes)))
    out = []
    for i, p in enumerate(sizes):
        u = degrees[i] if degrees else p
        if p < 1 or u < 1 or p % u != 0:
            raise invalid("profile request, shape %d (group size %d, Ulysses "
                          "degree %d): the degree does not divide the group "
                          "size" % (i, p, u))
        out.append((p, u))
    return out


def fits(request, length, p, recompute_index):
    """ProfilePointFits: at most the ratio's cap of tokens a GPU, or always
    when the request gives no cap for each ratio."""
    caps = request.max_tokens_per_gpu
    if len(caps) != len(request.recompute):
        return True
    return length <= caps[recompute_index] * p


def measured(request, length, shape, recompute_index):
    """ProfilePointMeasured: the point fits, and its length is at most
    ``all_groups_up_to_length`` (when set) or ``shape`` is the first of the
    largest group size."""
    sizes = list(request.group_sizes)
    if not fits(request, length, sizes[shape], recompute_index):
        return False
    up_to = request.all_groups_up_to_length
    if up_to <= 0 or length <= up_to:
        return True
    return shape == sizes.index(max(sizes))


def _group_of(request, p, rank):
    for group in request.groups:
        if len(group.ranks) == p and rank in group.ranks:
            return group
    return None


def _probe(request, group, u, length, recompute, sample, rank):
    """The one-task RankStep a point runs, made like a planned one (the
    C++ agent's ModelExecutor::ProfilePoint makes the same)."""
    plan = pb.RankStep(epoch=request.epoch, step=-1, rank=rank,
                       total_tokens=length)
    task = plan.tasks.add(task_index=0, samples=[sample], lengths=[length],
                          recompute=recompute, ulysses=u)
    if group is None:
        task.ranks.append(rank)
    else:
        task.group_id = group.id
        task.ranks.extend(group.ranks)
        plan.groups.add().CopyFrom(group)
    return plan


def run(request, rank, rehearse, resolve=lambda plan: plan,
        clock=time.perf_counter):
    """The ProfileReport of ``rank``: for each shape (in order), on the
    request's group of its size holding ``rank`` (alone for 1), for each
    length and then each recompute ratio that `measured` keeps, the
    median over the request's repetitions of the seconds
    ``rehearse(resolve(plan))`` took, ``plan`` the point's one-task
    RankStep (``resolve`` runs before the clock starts). Only a group's first rank reports
    the group's points (every rank for size 1); memory is not measured
    (0). INVALID_ARGUMENT for malformed shapes or a size no group of which
    holds ``rank``."""
    # Every shape's group first: a request this rank cannot run fails
    # before any point, so that no peer waits on it in a collective.
    groups = []
    for p, u in shapes(request):
        group = None
        if p > 1:
            group = _group_of(request, p, rank)
            if group is None:
                raise invalid("profile request: no group of %d ranks holds "
                              "rank %d" % (p, rank))
        groups.append((p, u, group))
    profile = pb.Profile()
    sample = 0
    for shape, (p, u, group) in enumerate(groups):
        reports = group is None or group.ranks[0] == rank
        for length in request.lengths:
            for i, recompute in enumerate(request.recompute):
                if not measured(request, length, shape, i):
                    continue
                step = resolve(_probe(request, group, u, length,
                                      recompute, sample, rank))
                sample += 1
                seconds = []
                for _ in range(max(1, request.repetitions)):
                    start = clock()
                    rehearse(step)
                    seconds.append(clock() - start)
                if reports:
                    profile.entries.add(
                        length=length, group_size=p, recompute=recompute,
                        seconds=max(statistics.median(seconds), 1e-9),
                        memory_bytes=0, ulysses=u)
    return pb.ProfileReport(rank=rank, epoch=request.epoch, profile=profile)
