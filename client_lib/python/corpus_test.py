"""dcp.SyntheticCorpus against train/corpus.h's, token for token: the C++
corpus_reference answers the same cases (rule corpora of several
vocabularies, seeds up to 2^64 - 1, patterns and noise levels, a text
corpus, and the refusals), with numpy's array draws and without them.

Run by run_python_test.sh under Bazel: corpus_test.py REFERENCE TEXT_FILE.
"""

import os
import subprocess
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import dcp  # noqa: E402
from dcp import _corpus  # noqa: E402

REFERENCE, TEXT = sys.argv[1:3]
del sys.argv[1:3]

CORPORA = [
    dict(vocab=16, seed=3),
    dict(vocab=256, seed=0),
    dict(vocab=1000, seed=2 ** 64 - 1, patterns=3, noise=0.3),
    dict(vocab=1, seed=5, patterns=1),
    dict(vocab=32000, seed=12345, patterns=7, noise=0.0),
    dict(vocab=128256, seed=1, noise=0.05),
    dict(vocab=256, seed=7, text=TEXT),
    dict(vocab=300, seed=9, text=TEXT, max_length=64),
]
SAMPLES = [(0, 1), (1, 2), (2, 3), (5, 10), (42, 513), (10 ** 12, 300),
           (7, 5000), (3, 65536)]
REFUSED = [(-1, 4), (0, 0), (0, -5), (1, 2 ** 20 + 1)]


def reference(cases):
    """The C++ corpus's answers: (inputs, targets) or the error text."""
    lines = []
    for kw, sample, length in cases:
        line = "%d %d %d %r %d %d %d" % (
            kw["vocab"], kw["seed"], kw.get("patterns", 4),
            kw.get("noise", 0.05), kw.get("max_length", 1 << 20), sample,
            length)
        if "text" in kw:
            line += " " + kw["text"]
        lines.append(line)
    out = subprocess.run([REFERENCE], input="\n".join(lines) + "\n",
                         capture_output=True, text=True, check=True,
                         timeout=600).stdout.splitlines()
    answers = []
    for line in out:
        if line.startswith("OK "):
            inputs, targets = line[3:].split(" | ")
            answers.append(([int(t) for t in inputs.split()],
                            [int(t) for t in targets.split()]))
        else:
            answers.append(line[len("ERROR "):])
    assert len(answers) == len(cases), out[-3:]
    return answers


def python_corpus(kw):
    kw = dict(kw)
    if "text" in kw:
        with open(kw["text"], "rb") as f:
            kw["text"] = f.read()
    return dcp.SyntheticCorpus(**kw)


class CorpusTest(unittest.TestCase):

    def check(self):
        cases = [(kw, s, n) for kw in CORPORA for s, n in
                 SAMPLES + REFUSED if n <= kw.get("max_length", 1 << 20) or
                 (s, n) in REFUSED]
        cases.append((dict(vocab=16, seed=1, text=TEXT), 0, 4))
        cases.append((dict(vocab=0, seed=1), 0, 4))
        want = reference(cases)
        corpora = {}
        for (kw, sample, length), expected in zip(cases, want):
            key = repr(sorted(kw.items()))
            if key not in corpora:
                corpora[key] = python_corpus(kw)
            corpus = corpora[key]
            if isinstance(expected, str):
                with self.assertRaises(dcp.Error) as raised:
                    corpus.tokens(sample, length)
                self.assertEqual(str(raised.exception), expected)
                continue
            got = corpus.tokens(sample, length)
            self.assertEqual(got, expected, (kw, sample, length))
        return len(cases)

    def test_numpy_draws_equal_the_cpp_corpus(self):
        if _corpus._np is None:
            self.skipTest("no numpy")
        print("%d cases with numpy" % self.check(), file=sys.stderr)

    def test_python_draws_equal_the_cpp_corpus(self):
        saved, _corpus._np = _corpus._np, None
        try:
            print("%d cases without numpy" % self.check(), file=sys.stderr)
        finally:
            _corpus._np = saved


if __name__ == "__main__":
    unittest.main(verbosity=2)
