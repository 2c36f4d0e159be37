"""The synthetic corpus the examples train on, token for token the C++
one's (train/corpus.h: ``SyntheticCorpus::Tokens``), so that a Python rank
and a C++ rank materialise the same samples. corpus_test checks it against
the C++ corpus.

Draws are counter-based (SplitMix64 over (seed, stream, sample, token)), so
sample ``id`` of length L is a pure function of (options, id, L). With
numpy present the draws of a sample are computed as arrays; the recurrence
of the rules is a loop either way.
"""

from dcp._errors import invalid

try:
    import numpy as _np
except ImportError:  # The pure-Python draws give the same tokens.
    _np = None

_MASK = (1 << 64) - 1
_GOLDEN = 0x9E3779B97F4A7C15
_MUL1 = 0xBF58476D1CE4E5B9
_MUL2 = 0x94D049BB133111EB

# train/corpus.cc's streams.
_PERM, _PATTERN, _START, _NOISE_COIN, _NOISE_TOKEN = 1, 2, 3, 4, 5
_TEXT_OFFSET = 9


def _splitmix64(x):
    x = (x + _GOLDEN) & _MASK
    x = ((x ^ (x >> 30)) * _MUL1) & _MASK
    x = ((x ^ (x >> 27)) * _MUL2) & _MASK
    return x ^ (x >> 31)


def _draw(seed, stream, a, b=0, c=0):
    h = _splitmix64((seed ^ (stream << 56)) & _MASK)
    h = _splitmix64(h ^ (a & _MASK))
    h = _splitmix64(h ^ (b & _MASK))
    return _splitmix64(h ^ (c & _MASK))


def _np_splitmix64(x):
    x = x + _np.uint64(_GOLDEN)
    x = (x ^ (x >> _np.uint64(30))) * _np.uint64(_MUL1)
    x = (x ^ (x >> _np.uint64(27))) * _np.uint64(_MUL2)
    return x ^ (x >> _np.uint64(31))


def _draws(seed, stream, a, bs):
    """[_draw(seed, stream, a, b) for b in bs] (bs a range)."""
    head = _splitmix64(_splitmix64((seed ^ (stream << 56)) & _MASK) ^
                       (a & _MASK))
    if _np is None or len(bs) < 64:
        return [_splitmix64(_splitmix64(head ^ b)) for b in bs]
    with _np.errstate(over="ignore"):
        b = _np.arange(bs.start, bs.stop, dtype=_np.uint64)
        h = _np_splitmix64(_np.uint64(head) ^ b)
        return _np_splitmix64(h).tolist()  # c = 0: h ^ 0 is h.


class SyntheticCorpus:
    """A deterministic synthetic corpus (train/corpus.h): token sample
    ``id`` follows one of ``patterns`` seeded table rules (even ones
    order-1, odd ones two tokens back), each later token replaced by a
    uniform one with probability ``noise``; or, with ``text``, it is a
    window of that text's bytes (vocab >= 256) at a seeded offset.

    Immutable after construction; thread-safe.

        corpus = dcp.SyntheticCorpus(vocab=256, seed=0)
        inputs, targets = corpus.tokens(42, 512)
    """

    def __init__(self, vocab=256, seed=0, patterns=4, noise=0.05,
                 max_length=1 << 20, text=""):
        self.vocab = int(vocab)
        self.seed = int(seed) & _MASK
        self.patterns = max(int(patterns), 1)
        self.noise = float(noise)
        self.max_length = int(max_length)
        self.text = text.encode("utf-8") if isinstance(text, str) else \
            bytes(text)
        self._perms = []
        if self.vocab >= 1:
            for k in range(self.patterns):
                perm = list(range(self.vocab))
                bits = _draws(self.seed, _PERM, k, range(self.vocab))
                # Fisher-Yates with counter-based draws.
                for i in range(self.vocab - 1, 0, -1):
                    j = bits[i] % (i + 1)
                    perm[i], perm[j] = perm[j], perm[i]
                self._perms.append(perm)

    def _check(self, sample, length):
        if sample < 0 or length <= 0 or length > self.max_length:
            raise invalid(
                "cannot materialise sample %d of length %d: ids must be >= 0 "
                "and lengths in [1, %d]" % (sample, length, self.max_length))
        if self.vocab < 1:
            raise invalid(
                "cannot materialise sample %d of length %d: the corpus has a "
                "vocabulary of %d tokens" % (sample, length, self.vocab))

    def pattern_of(self, sample):
        """The rule token sample ``sample`` follows, in [0, patterns)."""
        return _draw(self.seed, _PATTERN, int(sample)) % self.patterns

    def tokens(self, sample, length):
        """(inputs, targets) of ``sample`` truncated to ``length`` tokens:
        lists of token ids, targets[t] the token after inputs[t]. Raises
        dcp.Error (INVALID_ARGUMENT) naming the sample and the length for a
        negative id, a length <= 0 or over ``max_length``."""
        sample, length = int(sample), int(length)
        self._check(sample, length)
        if self.text:
            return self._text_tokens(sample, length)
        seed, vocab = self.seed, self.vocab
        pattern = self.pattern_of(sample)
        perm = self._perms[pattern]
        lag2 = pattern % 2 == 1
        starts = _draws(seed, _START, sample, range(2))
        coins = _draws(seed, _NOISE_COIN, sample, range(length + 1))
        # Uniform(bits) < noise, as a bound on the 53 high bits.
        limit = self.noise * 9007199254740992.0
        noisy = [t for t in range(2, length + 1) if (coins[t] >> 11) < limit]
        noise_tokens = {}
        if noisy:
            bits = _draws(seed, _NOISE_TOKEN, sample,
                          range(noisy[0], noisy[-1] + 1))
            noise_tokens = {t: bits[t - noisy[0]] % vocab for t in noisy}
        tokens = [0] * (length + 1)
        for t in range(min(2, length + 1)):
            tokens[t] = starts[t] % vocab
        for t in range(2, length + 1):
            token = noise_tokens.get(t)
            if token is None:
                token = perm[tokens[t - 2] if lag2 else tokens[t - 1]]
            tokens[t] = token
        return tokens[:-1], tokens[1:]

    def _text_tokens(self, sample, length):
        if self.vocab < 256:
            raise invalid(
                "cannot materialise sample %d of length %d: a text corpus's "
                "tokens are bytes, and the vocabulary has only %d"
                % (sample, length, self.vocab))
        text, size = self.text, len(self.text)
        offset = _draw(self.seed, _TEXT_OFFSET, sample, 0) % size
        window = [text[(offset + t) % size] for t in range(length + 1)]
        return window[:-1], window[1:]
