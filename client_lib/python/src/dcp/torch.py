"""torch.distributed for dcp's plans: each task's sequence-parallel group,
the Ulysses exchange, activation recompute and the loss of a packed task.

A task packs samples back to back (``task.lengths``); over its group of p
ranks the pack is padded at its end to ``p * shard_tokens`` tokens and rank r
holds tokens ``[r * shard_tokens, (r + 1) * shard_tokens)`` (``PackLayout``,
the same layout as train/sequence_layout.h). Padding tokens attend to nothing
and carry no loss.

    group = dcp.torch.group(task)            # None when the task is one rank's
    layout = dcp.torch.PackLayout(task.lengths, dcp.torch.size(group))
    tokens = layout.shard(whole_pack, dcp.torch.rank(group))
    ...
    q = dcp.torch.sequence_to_heads(q, group)   # [s/p, n, d] -> [s, n/p, d]
    x = dcp.torch.run_layers(model.layers, x, task.recompute)
    loss = dcp.torch.packed_loss(token_loss, layout, rank, task.loss_weights)

Groups meet in the store of the default process group
(``torch.distributed.init_process_group``), under the task's rendezvous prefix,
which the scheduler makes unique per (epoch, ranks): only the group's members
take part in forming it, and each distinct group is formed once and cached.
The backend is the default group's (Gloo on CPU, NCCL on GPU).
"""

import datetime
import math

import torch
import torch.distributed as dist
import torch.utils.checkpoint


class PackLayout:
    """Where the tokens of one packed task lie over a group of
    ``group_size`` ranks (see the module docstring)."""

    def __init__(self, lengths, group_size=1):
        lengths = [int(n) for n in lengths]
        if not lengths or min(lengths) <= 0:
            raise ValueError("a pack needs samples of positive lengths, got %r"
                             % (lengths,))
        if group_size < 1:
            raise ValueError("group size must be >= 1, got %d" % group_size)
        self.lengths = lengths
        self.group_size = group_size
        self.cu_seqlens = [0]
        for n in lengths:
            self.cu_seqlens.append(self.cu_seqlens[-1] + n)
        self.total_tokens = self.cu_seqlens[-1]
        self.shard_tokens = -(-self.total_tokens // group_size)
        self.padded_tokens = self.shard_tokens * group_size

    def shard_begin(self, rank):
        return rank * self.shard_tokens

    def real_tokens(self, rank):
        """Real tokens of ``rank``'s shard (its first ones)."""
        return min(max(self.total_tokens - self.shard_begin(rank), 0),
                   self.shard_tokens)

    def sample_ids(self, rank):
        """The sample of each real token of ``rank``'s shard."""
        begin, ids, sample = self.shard_begin(rank), [], 0
        for t in range(begin, begin + self.real_tokens(rank)):
            while t >= self.cu_seqlens[sample + 1]:
                sample += 1
            ids.append(sample)
        return ids

    def positions(self, rank):
        """Position within its sample of each of the shard's
        ``shard_tokens`` tokens (0 for padding)."""
        begin = self.shard_begin(rank)
        out = [0] * self.shard_tokens
        for i, s in enumerate(self.sample_ids(rank)):
            out[i] = begin + i - self.cu_seqlens[s]
        return out

    def shard(self, whole, rank):
        """``rank``'s rows of a tensor over the whole pack (first dimension
        ``total_tokens``), padded with zeros to ``shard_tokens`` rows."""
        if whole.shape[0] != self.total_tokens:
            raise ValueError("the pack has %d tokens, the tensor %d rows"
                             % (self.total_tokens, whole.shape[0]))
        begin, real = self.shard_begin(rank), self.real_tokens(rank)
        part = whole[begin:begin + real]
        if real == self.shard_tokens:
            return part
        pad = whole.new_zeros((self.shard_tokens - real,) + whole.shape[1:])
        return torch.cat([part, pad])


# ---- Groups ----------------------------------------------------------------

_groups = {}


def group(task, timeout=datetime.timedelta(minutes=5)):
    """The torch.distributed process group of ``task``'s ranks (None when
    the task runs on one rank), formed by its members only on first use and
    cached; this process must be one of them. Call it in task order on every
    member, as the plan lists them."""
    ranks = list(task.group_ranks)
    if len(ranks) <= 1:
        return None
    prefix = task.rendezvous_prefix
    if not prefix:
        raise ValueError("task %d has a group of %d ranks but no rendezvous "
                         "prefix (a plan not from a scheduler?)"
                         % (task.task_index, len(ranks)))
    cached = _groups.get(prefix)
    if cached is not None:
        return cached
    me = dist.get_rank()
    if me not in ranks:
        raise ValueError("rank %d is not in task %d's group %r"
                         % (me, task.task_index, ranks))
    store = dist.PrefixStore("dcp/" + prefix,
                             dist.distributed_c10d._get_default_store())
    made = _new_group(store, ranks.index(me), len(ranks), timeout)
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


# ---- Ulysses ---------------------------------------------------------------

def _exchange(send, group):
    send = send.contiguous()
    out = torch.empty_like(send)
    group.alltoall_base(out, send, [], []).wait()
    return out


def _seq_to_heads(x, group):
    p = size(group)
    s_local, n, d = x.shape
    send = x.reshape(s_local, p, n // p, d).permute(1, 0, 2, 3)
    if p > 1:
        send = _exchange(send, group)
    return send.reshape(p * s_local, n // p, d)


def _heads_to_seq(x, group):
    p = size(group)
    s, n_local, d = x.shape
    recv = x.reshape(p, s // p, n_local, d)
    if p > 1:
        recv = _exchange(recv, group)
    return recv.permute(1, 0, 2, 3).reshape(s // p, p * n_local, d)


def _exchange_function(forward, backward):
    """An autograd function running ``forward(x, group)`` whose backward is
    ``backward(grad, group)``."""

    class Exchange(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, group):
            ctx.group = group
            return forward(x, group)

        @staticmethod
        def backward(ctx, grad):
            return backward(grad, ctx.group), None

    return Exchange


_SeqToHeads = _exchange_function(_seq_to_heads, _heads_to_seq)
_HeadsToSeq = _exchange_function(_heads_to_seq, _seq_to_heads)


def _check(x, p, dim, what):
    if x.dim() != 3:
        raise ValueError("%s: expected [tokens, heads, dim], got %s"
                         % (what, tuple(x.shape)))
    if x.shape[dim] % p:
        raise ValueError("%s: dimension %d (%d) does not divide over the "
                         "group of %d" % (what, dim, x.shape[dim], p))


def sequence_to_heads(x, group):
    """[s/p, n, d] sequence-sharded -> [s, n/p, d] head-sharded: rank r gets
    heads [r n/p, (r+1) n/p) of every token, tokens in rank order. One
    all-to-all; its backward is ``heads_to_sequence``."""
    _check(x, size(group), 1, "sequence_to_heads")
    return _seq_to_heads(x, group) if group is None else \
        _SeqToHeads.apply(x, group)


def heads_to_sequence(x, group):
    """The inverse of ``sequence_to_heads``."""
    _check(x, size(group), 0, "heads_to_sequence")
    return _heads_to_seq(x, group) if group is None else \
        _HeadsToSeq.apply(x, group)


# ---- Recompute and loss ----------------------------------------------------

def recomputed_layers(num_layers, recompute):
    """How many of ``num_layers`` layers a recompute ratio checkpoints: the
    first round(ratio * layers), halves away from zero (as the C++ trainer)."""
    if not 0.0 <= recompute <= 1.0:
        raise ValueError("recompute ratio must lie in [0, 1], got %r"
                         % (recompute,))
    return int(math.floor(recompute * num_layers + 0.5))


def run_layers(layers, x, recompute, *args):
    """Runs ``x`` through ``layers`` in order (``layer(x, *args)``), the first
    ``recomputed_layers(len(layers), recompute)`` under
    torch.utils.checkpoint: their activations are dropped and recomputed in
    the backward pass (collectives included, so every member of a group must
    back-propagate its tasks in the same order)."""
    checkpointed = recomputed_layers(len(layers), recompute)
    for i, layer in enumerate(layers):
        if i < checkpointed:
            x = torch.utils.checkpoint.checkpoint(layer, x, *args,
                                                  use_reentrant=False)
        else:
            x = layer(x, *args)
    return x


def packed_loss(token_loss, layout, rank, loss_weights):
    """This rank's share of a packed task's loss: the sum over its shard's
    real tokens t of ``token_loss[t] * loss_weights[s] / length[s]``, s the
    sample of t. Summed over the group's ranks it is the task's loss,
    ``sum_s loss_weights[s] * mean_t token_loss(s, t)``; back-propagating
    each rank's share and summing gradients over the world gives the
    gradient of the step's loss."""
    ids = layout.sample_ids(rank)
    if token_loss.shape[0] != len(ids):
        raise ValueError("token_loss has %d entries, the shard %d real tokens"
                         % (token_loss.shape[0], len(ids)))
    if len(loss_weights) != len(layout.lengths):
        raise ValueError("%d loss weights for %d samples"
                         % (len(loss_weights), len(layout.lengths)))
    scale = torch.tensor([loss_weights[s] / layout.lengths[s] for s in ids],
                         dtype=torch.float64)
    return (token_loss * scale.to(token_loss)).sum()
