"""The torch.distributed groups of dcp's tasks: each task's group, or its
Ulysses subgroup and ring, formed by the members in the default group's
store and cached (see dcp.torch's docstring), and the rank and size of a
group that may be None (a group of one). dcp.torch re-exports the public
names."""

import datetime

import torch.distributed as dist

from dcp._layout import PackLayout, ulysses_degree


_groups = {}


def group(task, timeout=datetime.timedelta(minutes=5)):
    """The torch.distributed process group of ``task``'s ranks (None when
    the task runs on one rank), formed by its members only on first use and
    cached; this process must be one of them. Call it in task order on every
    member, as the plan lists them."""
    ranks = list(task.group_ranks)
    if len(ranks) <= 1:
        return None
    return _cached(task.rendezvous_prefix, _member(task), len(ranks), timeout)


class TaskGroups:
    """The groups a task's attention runs over, seen from one member:
    ``ulysses``, its Ulysses subgroup (None when u == 1), and ``ring``, its
    ring (None when c == 1). ``size`` is the task's group size p = u * c,
    ``rank`` the member's index m = j * u + i in it (j its ring position,
    i its Ulysses index). Holds no resources of its own: the groups are the
    module's cached ones."""

    def __init__(self, ulysses=None, ring=None):
        self.ulysses, self.ring = ulysses, ring
        self.ulysses_size, self.ring_size = size(ulysses), size(ring)
        self.size = self.ulysses_size * self.ring_size
        self.rank = rank(ring) * self.ulysses_size + rank(ulysses)

    def layout(self, lengths):
        """The PackLayout of a pack of ``lengths`` over these groups."""
        return PackLayout(lengths, self.size, self.ulysses_size)


def task_groups(task, timeout=datetime.timedelta(minutes=5)):
    """``task``'s TaskGroups for this process, a member of its group: with
    c == 1 (``task.ulysses`` 0 or the group size) the Ulysses group is
    ``group(task)``; otherwise member m forms the Ulysses subgroup
    ``<prefix>/h<u>/u<j>`` and the ring ``<prefix>/h<u>/r<i>``, each once,
    cached by that name (which carries u: tasks of one prefix may differ in
    their degree). Call it in task order on every member. ValueError (before any
    group is formed) when the task's Ulysses degree does not divide its
    group."""
    p = len(task.group_ranks)
    u = ulysses_degree(getattr(task, "ulysses", 0), max(p, 1))
    c = max(p, 1) // u
    if c == 1:
        return TaskGroups(group(task, timeout), None)
    m = _member(task)
    j, i = m // u, m % u
    prefix = "%s/h%d" % (task.rendezvous_prefix.rstrip("/"), u)
    ulysses = None if u == 1 else \
        _cached("%s/u%d" % (prefix, j), i, u, timeout)
    ring = _cached("%s/r%d" % (prefix, i), j, c, timeout)
    return TaskGroups(ulysses, ring)


def _member(task):
    """This process's index in ``task``'s group; ValueError when it is not
    in it or the group has no rendezvous prefix."""
    ranks = list(task.group_ranks)
    if not task.rendezvous_prefix:
        raise ValueError("task %d has a group of %d ranks but no rendezvous "
                         "prefix (a plan not from a scheduler?)"
                         % (task.task_index, len(ranks)))
    me = dist.get_rank()
    if me not in ranks:
        raise ValueError("rank %d is not in task %d's group %r"
                         % (me, task.task_index, ranks))
    return ranks.index(me)


def _cached(prefix, member, members, timeout):
    """The group formed under ``prefix`` (member ``member`` of
    ``members``), formed on first use."""
    cached = _groups.get(prefix)
    if cached is not None:
        return cached
    store = dist.PrefixStore("dcp/" + prefix,
                             dist.distributed_c10d._get_default_store())
    made = _new_group(store, member, members, timeout)
    _groups[prefix] = made
    return made


def _new_group(store, rank, size, timeout):
    backend = dist.get_backend()
    if backend == "gloo":
        return dist.ProcessGroupGloo(store, rank, size, timeout)
    if backend == "nccl":
        options = dist.ProcessGroupNCCL.Options()
        options._timeout = timeout
        return dist.ProcessGroupNCCL(store, rank, size, options)
    raise ValueError("dcp.torch forms gloo or nccl groups; the default "
                     "process group's backend is %r" % backend)


def release_groups():
    """Forgets every cached group (e.g. after the world changed)."""
    _groups.clear()


def rank(group):
    return 0 if group is None else group.rank()


def size(group):
    return 1 if group is None else group.size()

