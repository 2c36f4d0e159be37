#!/usr/bin/env bash
# `pip install` of client_lib/python as a person does it from a checkout
# (offline: no build isolation, dependencies already installed), then the
# installed package alone: it imports, loads its schema, builds messages and
# a corpus, and refuses a bad client option.
set -euo pipefail
cd "${TEST_SRCDIR}/dcp"
work="${TEST_TMPDIR}/package"
rm -rf "${work}"
mkdir -p "${work}"
# A writable copy of the package's files (runfiles are read-only links).
cp -rL client_lib/python/pyproject.toml client_lib/python/src "${work}/"
export HOME="${work}/home" PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
/usr/bin/python3 -m pip install --quiet --no-build-isolation --no-deps \
  --no-index --target "${work}/site" "${work}"
ls "${work}/site/dcp"
cd "${work}"
PYTHONPATH="${work}/site" /usr/bin/python3 - <<'PY'
import os, sys
import dcp
from dcp import _messages as pb
site = os.environ["PYTHONPATH"]
assert dcp.__file__.startswith(site), dcp.__file__
assert os.path.exists(os.path.join(site, "dcp", "descriptor_set.pb"))
step = pb.RankStep(step=1)
assert pb.RankStep.FromString(step.SerializeToString()).step == 1
assert dcp.SyntheticCorpus(vocab=16, seed=3).tokens(5, 10)[0] == [
    13, 11, 10, 13, 0, 3, 1, 11, 6, 14]
try:
    dcp.Client(rank=0)
except dcp.Error as e:
    assert e.code == "INVALID_ARGUMENT", e
else:
    raise AssertionError("dcp.Client(rank=0) did not raise")
import dcp.torch  # noqa: F401 - python3-torch is installed here.
print("installed dcp from", os.path.dirname(dcp.__file__))
PY
