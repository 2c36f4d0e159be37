"""The training issue's model in PyTorch: the decoder of train/transformer.h,
op for op, so that a Python rank and a C++ rank given the same weights, plan
and tokens compute the same gradients.

Token embedding; per layer RMSNorm -> attention (rotary positions,
grouped-query heads, Ulysses over the task's group, or over its Ulysses
subgroups with ring attention across them) -> residual, RMSNorm -> SwiGLU
MLP -> residual; final RMSNorm; LM head; per-token cross-entropy.
Attention is block-diagonal per sample, causal within it, and positions
restart at 0 for each sample. Weights are drawn in float64 from a generator
seeded with ``seed`` in the C++ model's order, then cast. (The C++ model's
non-causal DiT variant is not ported.)

    spec = load_spec("data/models/cpu-tiny.json")
    model = Transformer(spec, seed=0, dtype=torch.float64)
    loss = model.task_loss(inputs, targets, cu_seqlens, loss_weights,
                           group=dcp.torch.task_groups(task),
                           recompute=task.recompute)
    loss.backward()
"""

import json
import math

import torch
import torch.nn.functional as F

import dcp.torch as dt


# torch's fused attention (torch >= 2.0; Debian's 1.13 has none): the
# per-sample attention's kernel where there is one.
_SDPA = getattr(F, "scaled_dot_product_attention", None)


def load_spec(path):
    """A model description (data/models/*.json; common/model_spec.h)."""
    with open(path) as f:
        spec = json.load(f)
    for key in ("layers", "hidden", "heads", "kv_heads", "ffn", "vocab"):
        if not isinstance(spec.get(key), int) or spec[key] < 1:
            raise ValueError("%s: '%s' must be a positive integer" % (path, key))
    if not spec.get("causal", True):
        raise ValueError("%s: the Python model is the causal decoder only"
                         % path)
    return spec


def kv_replication(heads, kv_heads, u):
    """Copies of each key/value head sent so that they divide over the u
    ranks of a Ulysses (sub)group (train/sequence_layout.h HeadLayout)."""
    if heads % kv_heads:
        raise ValueError("kv_heads (%d) must divide heads (%d)"
                         % (kv_heads, heads))
    if heads % u:
        raise ValueError("Ulysses sequence parallelism needs the Ulysses "
                         "degree u (the group size in plain Ulysses) to "
                         "divide the attention heads: u = %d, heads = %d"
                         % (u, heads))
    for f in range(1, heads // kv_heads + 1):
        if (kv_heads * f) % u == 0 and heads % (kv_heads * f) == 0:
            return f
    raise AssertionError("unreachable: f = heads / kv_heads always works")


def rms_norm(x, weight, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight


class _Run:
    """What every layer of one task reads besides its weights."""

    def __init__(self, model, layout, groups):
        spec = model.spec
        self.group, self.ring = groups.ulysses, groups.ring
        self.layout, self.rank = layout, groups.rank
        self.u = groups.ulysses_size
        self.heads, self.kv_heads = spec["heads"], spec["kv_heads"]
        self.rep = kv_replication(self.heads, self.kv_heads, self.u)
        self.head_dim = spec["hidden"] // spec["heads"]
        self.eps = model.norm_eps
        half = self.head_dim // 2
        pos = torch.tensor(layout.positions(self.rank), dtype=torch.float64)
        inv_freq = torch.pow(model.rope_theta,
                             -torch.arange(half, dtype=torch.float64) / half)
        angles = torch.outer(pos, inv_freq).unsqueeze(1)
        like = model.embed
        self.cos = angles.cos().to(like)
        self.sin = angles.sin().to(like)

    def rope(self, x):
        half = x.shape[-1] // 2
        x1, x2 = x[..., :half], x[..., half:]
        return torch.cat([x1 * self.cos - x2 * self.sin,
                          x2 * self.cos + x1 * self.sin], -1)

    def attention(self, q, k, v):
        """Attention over the tokens the Ulysses exchange gathered: the
        whole padded pack, or with a ring this ring position's shard."""
        if self.layout.ring > 1:
            return dt.ring_attention(q, k, v, self.layout, self.ring)
        return self.varlen_attention(q, k, v)

    def varlen_attention(self, q, k, v):
        """q [S, h, d], k, v [S, e, d]: block-diagonal causal attention per
        sample; padding rows come out zero."""
        group = q.shape[1] // k.shape[1]
        scale = 1.0 / math.sqrt(q.shape[2])
        cu, pieces = self.layout.cu_seqlens, []
        for s in range(len(cu) - 1):
            begin, length = cu[s], cu[s + 1] - cu[s]
            qs = q[begin:begin + length].transpose(0, 1)
            ks = k[begin:begin + length].transpose(0, 1)
            vs = v[begin:begin + length].transpose(0, 1)
            if group > 1:
                ks = ks.repeat_interleave(group, 0)
                vs = vs.repeat_interleave(group, 0)
            if _SDPA is not None:
                # torch >= 2.0: the fused kernel (flash attention on a GPU
                # in half precision), which never holds the scores.
                pieces.append(_SDPA(qs, ks, vs, is_causal=True)
                              .transpose(0, 1))
                continue
            scores = torch.matmul(qs, ks.transpose(1, 2)) * scale
            future = torch.ones(length, length, dtype=torch.bool,
                                device=q.device).triu(1)
            scores = scores.masked_fill(future, -math.inf)
            pieces.append(torch.matmul(torch.softmax(scores, -1), vs)
                          .transpose(0, 1))
        padding = q.shape[0] - self.layout.total_tokens
        if padding > 0:
            pieces.append(q.new_zeros(padding, q.shape[1], q.shape[2]))
        return torch.cat(pieces, 0)


class Layer(torch.nn.Module):
    def __init__(self, spec, draw, dtype, device):
        super().__init__()
        hidden, ffn, layers = spec["hidden"], spec["ffn"], spec["layers"]
        d = hidden // spec["heads"]
        in_std = 1.0 / math.sqrt(hidden)
        out_std = in_std / math.sqrt(2.0 * layers)
        ffn_std = 1.0 / math.sqrt(ffn) / math.sqrt(2.0 * layers)
        ones = lambda n: torch.nn.Parameter(
            torch.ones(n, dtype=dtype, device=device))
        self.attn_norm = ones(hidden)
        self.wq = draw((spec["heads"] * d, hidden), in_std)
        self.wk = draw((spec["kv_heads"] * d, hidden), in_std)
        self.wv = draw((spec["kv_heads"] * d, hidden), in_std)
        self.wo = draw((hidden, spec["heads"] * d), out_std)
        self.mlp_norm = ones(hidden)
        self.w_gate = draw((ffn, hidden), in_std)
        self.w_up = draw((ffn, hidden), in_std)
        self.w_down = draw((hidden, ffn), ffn_std)

    def attention(self, x, c):
        s_local, u, d = x.shape[0], c.u, c.head_dim
        q = c.rope(F.linear(x, self.wq).view(s_local, c.heads, d))
        k = c.rope(F.linear(x, self.wk).view(s_local, c.kv_heads, d))
        v = F.linear(x, self.wv).view(s_local, c.kv_heads, d)
        if c.rep > 1:
            k = k.repeat_interleave(c.rep, 1)
            v = v.repeat_interleave(c.rep, 1)
        h, e = c.heads // u, c.kv_heads * c.rep // u
        # Per destination rank: its query heads, then its kv heads.
        qkv = torch.cat([q.reshape(s_local, u, h, d),
                         k.reshape(s_local, u, e, d),
                         v.reshape(s_local, u, e, d)], 2)
        full = dt.sequence_to_heads(qkv.reshape(s_local, u * (h + 2 * e), d),
                                    c.group)
        out = c.attention(full[:, :h], full[:, h:h + e], full[:, h + e:])
        out = dt.heads_to_sequence(out, c.group)
        return F.linear(out.reshape(s_local, c.heads * d), self.wo)

    def forward(self, x, c):
        h = x + self.attention(rms_norm(x, self.attn_norm, c.eps), c)
        mlp_in = rms_norm(h, self.mlp_norm, c.eps)
        return h + F.linear(F.silu(F.linear(mlp_in, self.w_gate)) *
                            F.linear(mlp_in, self.w_up), self.w_down)


class Transformer(torch.nn.Module):
    def __init__(self, spec, seed=0, dtype=torch.float32, device="cpu",
                 rope_theta=10000.0, norm_eps=1e-6):
        super().__init__()
        if (spec["hidden"] // spec["heads"]) % 2 or \
                spec["hidden"] % spec["heads"]:
            raise ValueError("hidden / heads must be an even integer "
                             "(rotary positions)")
        self.spec, self.rope_theta, self.norm_eps = spec, rope_theta, norm_eps
        gen = torch.Generator()
        gen.manual_seed(seed)

        def draw(shape, std):
            w = torch.randn(shape, generator=gen, dtype=torch.float64) * std
            return torch.nn.Parameter(w.to(dtype=dtype, device=device))

        self.embed = draw((spec["vocab"], spec["hidden"]), 1.0)
        self.layers = torch.nn.ModuleList(
            Layer(spec, draw, dtype, device) for _ in range(spec["layers"]))
        self.final_norm = torch.nn.Parameter(
            torch.ones(spec["hidden"], dtype=dtype, device=device))
        self.lm_head = draw((spec["vocab"], spec["hidden"]),
                            1.0 / math.sqrt(spec["hidden"]))

    def task_loss(self, inputs, targets, cu_seqlens, loss_weights, group=None,
                  recompute=0.0):
        """This rank's share of one packed task's weighted loss
        (dcp.torch.packed_loss). ``inputs``/``targets`` are int64 token ids
        of the whole pack ([T], targets[t] the token after inputs[t]);
        ``cu_seqlens`` the samples' boundaries (0, ..., T). ``group`` is
        the task's group (plain Ulysses; None for one rank) or its
        dcp.torch.TaskGroups (Ulysses subgroup and ring). Every member
        calls it with the same task."""
        lengths = [b - a for a, b in zip(cu_seqlens, cu_seqlens[1:])]
        groups = group if isinstance(group, dt.TaskGroups) else \
            dt.TaskGroups(group, None)
        layout, r = groups.layout(lengths), groups.rank
        run = _Run(self, layout, groups)
        x = self.embed[layout.shard(inputs, r)]
        x = dt.run_layers(self.layers, x, recompute, run)
        real = layout.real_tokens(r)
        logits = F.linear(rms_norm(x, self.final_norm, self.norm_eps),
                          self.lm_head)[:real]
        target = layout.shard(targets, r)[:real]
        token_loss = -torch.log_softmax(logits, -1).gather(
            1, target.unsqueeze(1)).squeeze(1)
        return dt.packed_loss(token_loss, layout, r, loss_weights)
