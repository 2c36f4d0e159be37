"""Ring attention round a task's ring group: ``ring_attention`` and the
autograd function behind it, whose backward sends the keys and values round
the ring again. dcp.torch re-exports ``ring_attention``."""

import math

import torch

from dcp._task_groups import rank, size


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
