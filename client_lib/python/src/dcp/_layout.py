"""Where a packed task's tokens lie over its group: ``PackLayout`` (the
layout dcp.torch's docstring describes, train/sequence_layout.h's) and the
Ulysses degree of a group. dcp.torch re-exports both."""

import torch


class PackLayout:
    """Where the tokens of one packed task lie over a group of
    ``group_size`` ranks of which runs of ``ulysses`` (u) form Ulysses
    subgroups chained into a ring of c = group_size / u (see dcp.torch's
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
        # ring_attention's tiles, by device, ring position and causality
        # (dcp._ring's _RingTiles).
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
