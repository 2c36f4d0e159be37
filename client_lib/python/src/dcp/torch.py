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
"""

import datetime
import math

import torch
import torch.distributed as dist
import torch.utils.checkpoint


class PackLayout:
    """Where the tokens of one packed task lie over a group of
    ``group_size`` ranks of which runs of ``ulysses`` (u) form Ulysses
    subgroups chained into a ring of c = group_size / u (see the module
    docstring; 0 means u = group_size, plain Ulysses). With c == 1 rank r
    holds tokens ``[r * shard_tokens, (r + 1) * shard_tokens)``; with c > 1
    the pack is cut into 2c zig-zag chunks (``ring_shard_positions``).
    Either way a rank's real tokens come first in its shard."""

    def __init__(self, lengths, group_size=1, ulysses=0):
        lengths = [int(n) for n in lengths]
        if not lengths or min(lengths) <= 0:
            raise ValueError("a pack needs samples of positive lengths, got %r"
                             % (lengths,))
        if group_size < 1:
            raise ValueError("group size must be >= 1, got %d" % group_size)
        self.lengths = lengths
        self.group_size = group_size
        self.ulysses = ulysses_degree(ulysses, group_size)
        self.ring = group_size // self.ulysses
        self.cu_seqlens = [0]
        for n in lengths:
            self.cu_seqlens.append(self.cu_seqlens[-1] + n)
        self.total_tokens = self.cu_seqlens[-1]
        if self.ring == 1:
            self.shard_tokens = -(-self.total_tokens // group_size)
            self.padded_tokens = self.shard_tokens * group_size
        else:
            k = -(-self.total_tokens // (2 * group_size))
            self.shard_tokens = 2 * k
            self.padded_tokens = 2 * group_size * k
        # Tokens of one of the 2c chunks (the whole pack when c == 1).
        self.chunk_tokens = self.padded_tokens // (2 * self.ring) \
            if self.ring > 1 else self.padded_tokens
        # ring_attention's masks' inputs, by device (_ring_tables).
        self._ring_tables = {}

    def ring_position(self, rank):
        return rank // self.ulysses

    def ulysses_index(self, rank):
        return rank % self.ulysses

    def ring_shard_positions(self, position):
        """Global pack positions (padding ones >= ``total_tokens``) of the
        tokens ring position ``position`` attends for, in order: chunk j then
        chunk 2c-1-j (the whole padded pack when c == 1)."""
        return [t for begin, end in self._ring_pieces(position)
                for t in range(begin, end)]

    def _ring_pieces(self, position):
        if self.ring == 1:
            return [(0, self.padded_tokens)]
        size, last = self.chunk_tokens, 2 * self.ring - 1 - position
        return [(position * size, (position + 1) * size),
                (last * size, (last + 1) * size)]

    def _pieces(self, rank):
        """``rank``'s shard as ascending [begin, end) ranges of the pack."""
        if self.ring == 1:
            begin = rank * self.shard_tokens
            return [(begin, begin + self.shard_tokens)]
        # Offsets [first, last) of the ring shard, whose first half is one
        # chunk and second half the other.
        first = self.ulysses_index(rank) * self.shard_tokens
        last, size = first + self.shard_tokens, self.chunk_tokens
        (low, _), (high, _) = self._ring_pieces(self.ring_position(rank))
        pieces = []
        if first < size:
            pieces.append((low + first, low + min(last, size)))
        if last > size:
            pieces.append((high + max(first - size, 0), high + last - size))
        return pieces

    def token_positions(self, rank):
        """Global pack position of each of ``rank``'s ``shard_tokens``
        tokens (padding ones >= ``total_tokens``)."""
        return [t for begin, end in self._pieces(rank)
                for t in range(begin, end)]

    def shard_begin(self, rank):
        """Where ``rank``'s shard starts in the pack (its first piece's
        start when c > 1)."""
        return self._pieces(rank)[0][0]

    def real_tokens(self, rank):
        """Real tokens of ``rank``'s shard (its first ones)."""
        return sum(min(max(self.total_tokens - begin, 0), end - begin)
                   for begin, end in self._pieces(rank))

    def sample_ids(self, rank):
        """The sample of each real token of ``rank``'s shard."""
        ids, sample = [], 0
        for t in self.token_positions(rank)[:self.real_tokens(rank)]:
            while t >= self.cu_seqlens[sample + 1]:
                sample += 1
            ids.append(sample)
        return ids

    def positions(self, rank):
        """Position within its sample of each of the shard's
        ``shard_tokens`` tokens (0 for padding)."""
        out = [0] * self.shard_tokens
        real = self.token_positions(rank)
        for i, s in enumerate(self.sample_ids(rank)):
            out[i] = real[i] - self.cu_seqlens[s]
        return out

    def shard(self, whole, rank):
        """``rank``'s rows of a tensor over the whole pack (first dimension
        ``total_tokens``), padded with zeros to ``shard_tokens`` rows."""
        if whole.shape[0] != self.total_tokens:
            raise ValueError("the pack has %d tokens, the tensor %d rows"
                             % (self.total_tokens, whole.shape[0]))
        parts = [whole[begin:min(end, self.total_tokens)]
                 for begin, end in self._pieces(rank)
                 if begin < self.total_tokens]
        real = self.real_tokens(rank)
        part = parts[0] if len(parts) == 1 else torch.cat(parts or [whole[:0]])
        if real == self.shard_tokens:
            return part
        pad = whole.new_zeros((self.shard_tokens - real,) + whole.shape[1:])
        return torch.cat([part, pad])


def ulysses_degree(ulysses, group_size):
    """The Ulysses degree u of a group of ``group_size`` ranks whose task
    says ``ulysses`` (0: the whole group); ValueError unless u divides it."""
    ulysses = int(ulysses)
    if ulysses < 0:
        raise ValueError("the Ulysses degree must be >= 0 (0: the whole "
                         "group), got %d" % ulysses)
    if ulysses == 0:
        return group_size
    if group_size % ulysses:
        raise ValueError("the Ulysses degree u = %d does not divide the "
                         "group size p = %d" % (ulysses, group_size))
    return ulysses


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


# ---- Ring attention --------------------------------------------------------

_RING_TAG = 0


def ring_attention(q, k, v, layout, ring, causal=True):
    """Attention of one ring position's tokens against the whole pack, the
    others' keys and values passed round ``ring`` (the task's ring group,
    None when c == 1; its rank is this ring position j).

    ``q`` [2C, h, d], ``k``/``v`` [2C, e, d] (e divides h; query head a
    reads kv head a // (h / e)) are ring shard j's tokens,
    ``layout.ring_shard_positions(j)``, as the Ulysses exchange over the
    subgroup leaves them. A query sees the keys of its own sample, and with
    ``causal`` only those at or before it; padding sees nothing and comes
    out zero. Blocks are merged by their log-sum-exp, in the inputs' dtype.
    The backward pass sends the keys and values round again, each block's
    gradient accumulator travelling with it until it is home. With causal
    zig-zag chunks, a block from an earlier ring position is seen by all
    queries through its first chunk only, one from a later position by the
    second chunk's queries only: both are half blocks."""
    c, j = size(ring), rank(ring)
    if c != layout.ring:
        raise ValueError("ring_attention: the layout has a ring of %d, the "
                         "ring group %d members" % (layout.ring, c))
    tokens = 2 * layout.chunk_tokens if c > 1 else layout.padded_tokens
    for x, what in ((q, "q"), (k, "k"), (v, "v")):
        if x.dim() != 3 or x.shape[0] != tokens:
            raise ValueError("ring_attention: %s must be [%d tokens (ring "
                             "shard %d), heads, dim], got %s"
                             % (what, tokens, j, tuple(x.shape)))
    if k.shape != v.shape or k.shape[2] != q.shape[2] or \
            q.shape[1] % k.shape[1]:
        raise ValueError("ring_attention: kv heads must divide the query "
                         "heads with k and v alike, got q %s, k %s, v %s"
                         % (tuple(q.shape), tuple(k.shape), tuple(v.shape)))
    out, _ = _RingAttention.apply(q, k, v, ring,
                                  _ring_tables(layout, q.device), causal)
    return out


def _ring_tables(layout, device):
    """[c, 2C] global positions and sample ids (-1 for padding) of every
    ring position's tokens, made once per layout and device."""
    tables, key = layout._ring_tables, str(device)
    if key not in tables:
        positions = torch.tensor([layout.ring_shard_positions(j)
                                  for j in range(layout.ring)],
                                 dtype=torch.int64, device=device)
        ends = torch.tensor(layout.cu_seqlens[1:], dtype=torch.int64,
                            device=device)
        samples = torch.bucketize(positions, ends, right=True)
        samples = samples.masked_fill(positions >= layout.total_tokens, -1)
        tables[key] = (positions, samples)
    return tables[key]


def _ring_pass(ring, send):
    """Starts sending ``send`` to the next ring position and receiving the
    previous one's; returns the receive buffer and the works to wait on.
    Odd positions post the receive first: NCCL runs a pair's sends and
    receives in the order posted, so where next and previous are one peer
    (c == 2) the two sides would otherwise both wait in a send."""
    c, j = ring.size(), ring.rank()
    recv = torch.empty_like(send)
    ops = [lambda: ring.send([send], (j + 1) % c, _RING_TAG),
           lambda: ring.recv([recv], (j - 1) % c, _RING_TAG)]
    if j % 2:
        ops.reverse()
    return recv, [op() for op in ops]


def _wait(works):
    for work in works:
        work.wait()


def _block_rows(j, r, tokens, causal):
    """The rows of ring shard j's queries and of ring shard r's keys that
    can meet (see ring_attention)."""
    everything, half = slice(0, tokens), tokens // 2
    if not causal or r == j:
        return everything, everything
    if r < j:
        return everything, slice(0, half)
    return slice(half, tokens), everything


def _block_scores(q, k, tables, j, r, rows, causal, scale):
    """Masked scores [h, len(q rows), len(k rows)] of one block; ``q``
    [h, ., d] and ``k`` [h, ., d] are those rows already."""
    positions, samples = tables
    q_rows, k_rows = rows
    q_pos, k_pos = positions[j, q_rows], positions[r, k_rows]
    q_sample, k_sample = samples[j, q_rows], samples[r, k_rows]
    seen = (q_sample.unsqueeze(1) == k_sample.unsqueeze(0)) & \
        (q_sample >= 0).unsqueeze(1)
    if causal:
        seen = seen & (k_pos.unsqueeze(0) <= q_pos.unsqueeze(1))
    scores = torch.matmul(q, k.transpose(1, 2)) * scale
    return scores.masked_fill(~seen, -math.inf)


def _finite(lse):
    """``lse`` with the -inf of rows that see nothing made 0, so that
    exp(scores - lse) is 0 there rather than NaN."""
    return lse.masked_fill(torch.isinf(lse), 0.0)


def _heads_first(kv, rows, repeat):
    """k or v rows [., e, d] as [h, ., d], each kv head repeated for its
    query heads."""
    x = kv[rows].transpose(0, 1)
    return x.repeat_interleave(repeat, 0) if repeat > 1 else x


class _RingAttention(torch.autograd.Function):
    """ring_attention's forward and backward; returns (out [2C, h, d],
    lse [h, 2C]), the log-sum-exp not differentiable."""

    @staticmethod
    def forward(ctx, q, k, v, ring, tables, causal):
        c, j = size(ring), rank(ring)
        tokens, heads, dim = q.shape
        repeat = heads // k.shape[1]
        scale = 1.0 / math.sqrt(dim)
        qh = q.transpose(0, 1)
        out = q.new_zeros(heads, tokens, dim)
        lse = q.new_full((heads, tokens), -math.inf)
        kv = torch.stack([k, v])
        for step in range(c):
            r = (j - step) % c
            if step < c - 1:
                following, works = _ring_pass(ring, kv)
            rows = _block_rows(j, r, tokens, causal)
            scores = _block_scores(qh[:, rows[0]],
                                   _heads_first(kv[0], rows[1], repeat),
                                   tables, j, r, rows, causal, scale)
            block_lse = torch.logsumexp(scores, -1)
            block = torch.matmul(
                torch.exp(scores - _finite(block_lse).unsqueeze(-1)),
                _heads_first(kv[1], rows[1], repeat))
            merged = torch.logaddexp(lse[:, rows[0]], block_lse)
            safe = _finite(merged)
            out[:, rows[0]] = \
                out[:, rows[0]] * torch.exp(lse[:, rows[0]] - safe) \
                .unsqueeze(-1) + \
                block * torch.exp(block_lse - safe).unsqueeze(-1)
            lse[:, rows[0]] = merged
            if step < c - 1:
                _wait(works)
                kv = following
        out = out.transpose(0, 1).contiguous()
        ctx.ring, ctx.tables, ctx.causal = ring, tables, causal
        ctx.mark_non_differentiable(lse)
        ctx.save_for_backward(q, k, v, out, lse)
        return out, lse

    @staticmethod
    def backward(ctx, grad_out, _):
        q, k, v, out, lse = ctx.saved_tensors
        ring, tables, causal = ctx.ring, ctx.tables, ctx.causal
        c, j = size(ring), rank(ring)
        tokens, heads, dim = q.shape
        kv_heads = k.shape[1]
        repeat = heads // kv_heads
        scale = 1.0 / math.sqrt(dim)
        qh, dout = q.transpose(0, 1), grad_out.transpose(0, 1)
        # Rows' sum of dout * out: softmax's backward, per query.
        delta = (dout * out.transpose(0, 1)).sum(-1, keepdim=True)
        lse = _finite(lse).unsqueeze(-1)
        dq = torch.zeros_like(qh)
        kv = torch.stack([k, v])
        dkv = torch.zeros_like(kv)
        for step in range(c):
            r = (j - step) % c
            if step < c - 1:
                following, works = _ring_pass(ring, kv)
            q_rows, k_rows = rows = _block_rows(j, r, tokens, causal)
            kh = _heads_first(kv[0], k_rows, repeat)
            vh = _heads_first(kv[1], k_rows, repeat)
            probs = torch.exp(_block_scores(qh[:, q_rows], kh, tables, j, r,
                                            rows, causal, scale) -
                              lse[:, q_rows])
            d_scores = probs * (torch.matmul(dout[:, q_rows],
                                             vh.transpose(1, 2)) -
                                delta[:, q_rows])
            dq[:, q_rows] += torch.matmul(d_scores, kh) * scale
            dk = torch.matmul(d_scores.transpose(1, 2), qh[:, q_rows]) * scale
            dv = torch.matmul(probs.transpose(1, 2), dout[:, q_rows])
            for target, grad in ((0, dk), (1, dv)):
                grad = grad.reshape(kv_heads, repeat, -1, dim).sum(1)
                dkv[target, k_rows] += grad.transpose(0, 1)
            if step < c - 1:
                _wait(works)
                kv = following
            if c > 1:
                # Block r's accumulator goes on towards r; after the last
                # step it arrives there.
                dkv, works = _ring_pass(ring, dkv)
                _wait(works)
        return dq.transpose(0, 1), dkv[0], dkv[1], None, None, None


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
