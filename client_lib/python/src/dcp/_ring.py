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
    out zero. Each block is computed a sample at a time (see _RingTiles) and
    merged by its log-sum-exp, in the inputs' dtype.
    The backward pass sends the keys and values round again, each block's
    gradient accumulator travelling with it until it is home. With causal
    zig-zag chunks, a block from an earlier ring position is seen by all
    queries through its first chunk only, one from a later position by the
    second chunk's queries only: both are half blocks, and the tiles,
    which follow the positions, compute no more than that."""
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
    out, _ = _RingAttention.apply(q, k, v, ring, _RingTiles(layout, j, c,
                                                            q.device, causal))
    return out


class _RingTiles:
    """Where ring shard j's queries meet each ring position's keys: per
    block (the keys of position r), a tile per run of one sample's query
    rows, against that sample's key rows of the block, with the causal mask
    where the tile needs one. Attention never leaves a sample, so a block
    costs the sum of its samples' tiles, not the square of the pack: a
    long sequence's ring block with short ones riding along computes the
    long one's tile and the short ones' own. Made once per layout, device
    and ring position; host lists, with the masks and key indices on the
    device."""

    def __init__(self, layout, j, c, device, causal):
        key = (str(device), j, causal)
        cached = layout._ring_tables.get(key)
        if cached is None:
            runs = [_sample_runs(layout, r) for r in range(c)]
            cached = [_block_tiles(runs[j], runs[r], causal, device)
                      for r in range(c)]
            layout._ring_tables[key] = cached
        self.blocks = cached

    def tiles(self, r):
        """Block r's tiles: (query row slice, key rows (a slice or an index
        tensor), mask [queries, keys] of the keys each query sees, or None
        when it sees them all)."""
        return self.blocks[r]


def _sample_runs(layout, position):
    """Ring position ``position``'s rows as runs of one sample: (sample,
    first row, end row, pack position of the first row), in row order;
    padding rows belong to none."""
    runs, row, cu = [], 0, layout.cu_seqlens
    for begin, end in layout._ring_pieces(position):
        real_end = min(end, layout.total_tokens)
        t, sample = begin, 0
        while t < real_end:
            while t >= cu[sample + 1]:
                sample += 1
            stop = min(real_end, cu[sample + 1])
            runs.append((sample, row + t - begin, row + stop - begin, t))
            t = stop
        row += end - begin
    return runs


def _block_tiles(q_runs, k_runs, causal, device):
    """The tiles of one block (see _RingTiles.tiles)."""
    tiles = []
    for sample, qa, qb, q_pos in q_runs:
        q_last = q_pos + qb - qa - 1
        keys = [(ka, kb, k_pos) for s, ka, kb, k_pos in k_runs
                if s == sample and not (causal and k_pos > q_last)]
        if not keys:
            continue
        if len(keys) == 1:
            rows = slice(keys[0][0], keys[0][1])
        else:
            rows = torch.cat([torch.arange(ka, kb) for ka, kb, _ in keys]) \
                .to(device)
        mask = None
        if causal and max(k_pos + kb - ka - 1 for ka, kb, k_pos in keys) > \
                q_pos:
            k_positions = torch.cat([torch.arange(k_pos, k_pos + kb - ka)
                                     for ka, kb, k_pos in keys])
            q_positions = torch.arange(q_pos, q_last + 1)
            mask = (k_positions.unsqueeze(0) <=
                    q_positions.unsqueeze(1)).to(device)
        tiles.append((slice(qa, qb), rows, mask))
    return tiles


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


def _tile_scores(q, k, mask, scale):
    """Scores [h, queries, keys] of one tile, -inf where the mask hides a
    key."""
    scores = torch.matmul(q, k.transpose(1, 2)) * scale
    return scores if mask is None else scores.masked_fill(~mask, -math.inf)


def _finite(lse):
    """``lse`` with the -inf of rows that see nothing made 0, so that
    exp(scores - lse) is 0 there rather than NaN."""
    return lse.masked_fill(torch.isinf(lse), 0.0)


def _heads_first(kv, rows, repeat):
    """k or v rows [., e, d] as [h, ., d], each kv head repeated for its
    query heads."""
    x = kv[rows].transpose(0, 1)
    return x.repeat_interleave(repeat, 0) if repeat > 1 else x


def _add_rows(target, rows, grad):
    """target[rows] += grad, rows a slice or an index tensor."""
    if isinstance(rows, slice):
        target[rows] += grad
    else:
        target.index_add_(0, rows, grad)


class _RingAttention(torch.autograd.Function):
    """ring_attention's forward and backward; returns (out [2C, h, d],
    lse [h, 2C]), the log-sum-exp not differentiable."""

    @staticmethod
    def forward(ctx, q, k, v, ring, tiles):
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
            # A query run is in one tile of a block: each tile's result
            # merges into the running one by the log-sum-exp.
            for q_rows, k_rows, mask in tiles.tiles(r):
                scores = _tile_scores(qh[:, q_rows],
                                      _heads_first(kv[0], k_rows, repeat),
                                      mask, scale)
                tile_lse = torch.logsumexp(scores, -1)
                tile = torch.matmul(
                    torch.exp(scores - _finite(tile_lse).unsqueeze(-1)),
                    _heads_first(kv[1], k_rows, repeat))
                merged = torch.logaddexp(lse[:, q_rows], tile_lse)
                safe = _finite(merged)
                out[:, q_rows] = \
                    out[:, q_rows] * torch.exp(lse[:, q_rows] - safe) \
                    .unsqueeze(-1) + \
                    tile * torch.exp(tile_lse - safe).unsqueeze(-1)
                lse[:, q_rows] = merged
            if step < c - 1:
                _wait(works)
                kv = following
        out = out.transpose(0, 1).contiguous()
        ctx.ring, ctx.tiles = ring, tiles
        ctx.mark_non_differentiable(lse)
        ctx.save_for_backward(q, k, v, out, lse)
        return out, lse

    @staticmethod
    def backward(ctx, grad_out, _):
        q, k, v, out, lse = ctx.saved_tensors
        ring, tiles = ctx.ring, ctx.tiles
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
            for q_rows, k_rows, mask in tiles.tiles(r):
                kh = _heads_first(kv[0], k_rows, repeat)
                vh = _heads_first(kv[1], k_rows, repeat)
                probs = torch.exp(_tile_scores(qh[:, q_rows], kh, mask,
                                               scale) - lse[:, q_rows])
                d_scores = probs * (torch.matmul(dout[:, q_rows],
                                                 vh.transpose(1, 2)) -
                                    delta[:, q_rows])
                dq[:, q_rows] += torch.matmul(d_scores, kh) * scale
                dk = torch.matmul(d_scores.transpose(1, 2),
                                  qh[:, q_rows]) * scale
                dv = torch.matmul(probs.transpose(1, 2), dout[:, q_rows])
                for target, grad in ((0, dk), (1, dv)):
                    grad = grad.reshape(kv_heads, repeat, -1, dim).sum(1)
                    _add_rows(dkv[target], k_rows, grad.transpose(0, 1))
            if step < c - 1:
                _wait(works)
                kv = following
            if c > 1:
                # Block r's accumulator goes on towards r; after the last
                # step it arrives there.
                dkv, works = _ring_pass(ring, dkv)
                _wait(works)
        return dq.transpose(0, 1), dkv[0], dkv[1], None, None
