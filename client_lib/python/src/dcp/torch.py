"""torch.distributed for dcp's plans: each task's sequence-parallel groups,
the Ulysses exchange, ring attention, activation recompute and the loss of a
packed task.

A task packs samples back to back (``task.lengths``) over its group of p
ranks, u-way Ulysses (``task.ulysses``; 0 means u = p) inside a ring of
c = p / u (``PackLayout``, the layout train/ shares). With c == 1 the pack
is padded at its end to ``p * shard_tokens`` tokens and rank r holds tokens
``[r * shard_tokens, (r + 1) * shard_tokens)`` (train/sequence_layout.h).
With c > 1 it is padded to 2c chunks of u * k tokens, k = ceil(T / 2cu):
ring position j (members j*u .. j*u+u-1) holds chunk j and chunk 2c-1-j,
which balances causal attention, and its member i tokens [2ik, 2ik+2k) of
those two. Padding tokens attend to nothing and carry no loss.

    groups = dcp.torch.task_groups(task)     # Ulysses subgroup and ring
    layout = groups.layout(task.lengths)
    tokens = layout.shard(whole_pack, groups.rank)
    ...
    q = dcp.torch.sequence_to_heads(q, groups.ulysses)  # [s/u, n] -> [s, n/u]
    out = dcp.torch.ring_attention(q, k, v, layout, groups.ring)  # c > 1
    x = dcp.torch.run_layers(model.layers, x, task.recompute)
    loss = dcp.torch.packed_loss(token_loss, layout, groups.rank,
                                 task.loss_weights)

Groups meet in the store of the default process group
(``torch.distributed.init_process_group``), under the task's rendezvous
prefix, which the scheduler makes unique per (epoch, ranks): only the
group's members take part in forming it, and each distinct group is formed
once and cached (``release_groups`` forgets them). The backend is the
default group's (Gloo on CPU, NCCL on GPU).

The pack layout lives in dcp._layout, the groups in dcp._task_groups and
ring attention in dcp._ring; this module re-exports them beside the Ulysses
exchange, the recompute helper and the packed loss.
"""

import math

import torch
import torch.utils.checkpoint

from dcp._layout import PackLayout, ulysses_degree
from dcp._ring import ring_attention
from dcp._task_groups import (TaskGroups, group, rank, release_groups, size,
                              task_groups)

__all__ = [
    "PackLayout", "TaskGroups", "group", "heads_to_sequence", "packed_loss",
    "rank", "recomputed_layers", "release_groups", "ring_attention",
    "run_layers", "sequence_to_heads", "size", "task_groups",
    "ulysses_degree",
]


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
