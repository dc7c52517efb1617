#!/usr/bin/env python3
"""Writes tests/python/data/oldnames-store.tar.gz: a store saved by the binding as it was before
names became plain dotted paths (commit ee43f25, where a key's '.' was written %2E and '%' %25:
"model.fc1%2Eweight"), so that test_names.py checks that such stores still read, with the same
names shown as dotted.  Kept to say how the fixture was made; rerunning it with a newer binding
would write the new names, so it refuses unless the binding still escapes.

Run: CKPT_LIBRARY=build/lib/libckpt.so.0 /usr/bin/python3 tests/python/mk_oldnames.py OUT.tar.gz
"""

import collections
import os
import sys
import tarfile
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "python"))


def state(step):
    """The saved state of checkpoint `step` (values from arange: the same on every torch)."""
    import torch

    def t(n, *shape):
        k = 1
        for s in shape:
            k *= s
        return (torch.arange(k, dtype=torch.float32) + 1000 * n + step).reshape(shape)

    model = collections.OrderedDict([
        ("fc1.weight", t(1, 4, 3)), ("fc1.bias", t(2, 4)), ("fc10.weight", t(3, 2, 4)),
        ("blocks.0.attn.weight", t(4, 8, 2)), ("blocks.1.attn.weight", t(5, 8, 2)),
        ("100%.scale", t(6))])
    return {"model": model,
            "optim": {"state": {0: {"exp_avg": t(7, 4, 3)}},
                      "param_groups": [{"lr": 0.5, "params": [0]}]},
            "step": step,
            # two stored names that both read "x.y.z" once unescaped
            "x.y": {"z": t(8, 2)}, "x": {"y.z": t(9, 3)}}


def main(out):
    import libckpt
    from libckpt import _tree
    if not hasattr(_tree, "escape") or _tree.escape("a.b") != "a%2Eb":
        sys.exit("mk_oldnames.py: this binding no longer escapes keys; run it at commit ee43f25")
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "store")
        with libckpt.Store(path, create=True, pool_size="8M", threads=1) as st:
            for step in (1, 2):
                st.save(state(step), step, metadata={"note": f"step {step}"})
        with tarfile.open(out, "w:gz") as tar:
            tar.add(path, arcname="store")


if __name__ == "__main__":
    main(sys.argv[1])
