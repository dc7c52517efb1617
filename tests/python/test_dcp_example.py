#!/usr/bin/env python3
"""The DCP example as the docs show it (torch 2.x venv; tests/python/t-python-dcp-example.sh):
the python blocks of python/README.md ("DCP") and docs/guide.md marked as excerpts of
examples/dcp_fsdp2.py are lines of that file, in order; the file runs as written on 2 gloo ranks
(FSDP2 training while dcp.async_save runs), stopped at step 10 and run again to 20, and its
checkpoint of step 20 holds the same tensors as an uninterrupted run's."""

import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
EXAMPLE = os.path.join(ROOT, "examples", "dcp_fsdp2.py")
MARK = "<!-- excerpt of examples/dcp_fsdp2.py"
sys.path.insert(0, os.path.join(ROOT, "python"))

# A rank: torch.distributed.init_process_group as the example calls it, given a file:// rendezvous
# (torchrun's env:// would need a port), then the example as its own __main__.
RANK = """
import functools, runpy, sys
import torch.distributed as dist
rank, world, init, example = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
dist.init_process_group = functools.partial(dist.init_process_group, init_method="file://" + init,
                                            rank=rank, world_size=world)
sys.argv = sys.argv[4:]
runpy.run_path(example, run_name="__main__")
"""


def excerpts():
    """Every marked block is an excerpt: each of its lines (but '...') is a line of the example."""
    lines = [ln.strip() for ln in open(EXAMPLE, encoding="utf-8")]
    n = 0
    for doc in ("python/README.md", "docs/guide.md"):
        text = open(os.path.join(ROOT, doc), encoding="utf-8").read()
        blocks = re.findall(re.escape(MARK) + r"[^\n]*\n```python\n(.*?)\n```", text, re.S)
        assert blocks, f"{doc}: no ```python block after a '{MARK}' line"
        for b in blocks:
            for ln in b.splitlines():
                ln = ln.strip()
                assert not ln or ln == "..." or ln in lines, \
                    f"{doc}: {ln!r} is not a line of examples/dcp_fsdp2.py"
            n += 1
    print(f"ok: the {n} DCP blocks of the docs are lines of examples/dcp_fsdp2.py")


def run(store, steps, world=2):
    fd, init = tempfile.mkstemp(prefix="ckpt-init-")
    os.close(fd)
    os.unlink(init)
    env = dict(os.environ, GLOO_SOCKET_IFNAME="lo", OMP_NUM_THREADS="1",
               PYTHONPATH=os.path.join(ROOT, "python"))
    procs = [subprocess.Popen([sys.executable, "-c", RANK, str(r), str(world), init, EXAMPLE,
                               store, str(steps)], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True) for r in range(world)]
    outs = []
    try:
        for p in procs:
            outs.append((p.communicate(timeout=300)[0], p.returncode))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        if os.path.exists(init):
            os.unlink(init)
    for r, (out, rc) in enumerate(outs):
        assert rc == 0, f"examples/dcp_fsdp2.py {store} {steps}: rank {r} exited {rc}:\n" + \
            "\n".join(f"--- rank {i}\n{o}" for i, (o, _) in enumerate(outs))
        # No warning from the program, libckpt or DCP: the example passes its group as the docs
        # say. torch's own CUDA probe warns where a CUDA library without a device is loaded
        # (the test double of tests/run.sh): not the example's doing.
        warned = [ln for ln in out.splitlines() if "warn" in ln.lower() and
                  "CUDA initialization" not in ln]
        assert not warned, f"rank {r} warned:\n{out}"
    return outs[0][0]


def main():
    try:
        import libckpt.dcp  # noqa: F401
    except ImportError as e:
        print(f"skip: {e}")
        return 77
    import torch
    import libckpt
    excerpts()
    with tempfile.TemporaryDirectory() as tmp:
        a, b = os.path.join(tmp, "a", "ckpt"), os.path.join(tmp, "b", "ckpt")
        out = run(a, 20)
        assert "trained to step 20" in out, out
        run(b, 10)
        out = run(b, 20)
        assert "resumed, trained to step 20" in out, out
        with libckpt.Store(a, read_only=True) as sa, libckpt.Store(b, read_only=True) as sb:
            assert sa.steps() == [5, 10, 15, 20] and sb.steps() == [5, 10, 15, 20], \
                (sa.steps(), sb.steps())
            x, y = sa.load(20), sb.load(20)
        assert sorted(x) == sorted(y) and any(k.startswith("app.optim.") for k in x), sorted(x)
        for k in x:
            assert x[k].dtype == y[k].dtype and torch.equal(x[k], y[k]), f"step 20: {k} differs"
        print(f"ok: examples/dcp_fsdp2.py on 2 ranks, stopped at 10 and resumed, ends as an "
              f"uninterrupted run ({len(x)} entries of step 20 equal)")
    print("python dcp example ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
