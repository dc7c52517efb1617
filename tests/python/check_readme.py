"""Runs the Python programs of docs/guide.md and python/README.md exactly as written (each is the
```python block right after a "<!-- tested: tests/python/check_readme.py" line), in fresh
processes: once for 30 steps, and once stopped after 20 steps and run again to 30 against a
freshly built model and optimizer.  Both must end with bit-identical checkpoints.

Run from the repository root with /usr/bin/python3 (tests/python/t-readme-python.sh does it).
"""

import os
import re
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "python"))
import libckpt  # noqa: E402
import torch  # noqa: E402

MARK = "<!-- tested: tests/python/check_readme.py"


def blocks(path):
    text = open(os.path.join(ROOT, path), encoding="utf-8").read()
    found = re.findall(re.escape(MARK) + r"[^\n]*\n```python\n(.*?)\n```", text, re.S)
    if not found:
        sys.exit(f"FAIL: {path} has no ```python block after a '{MARK}' line")
    return found


def run(script, store, steps):
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python"), OMP_NUM_THREADS="1")
    out = subprocess.run([sys.executable, script, store, str(steps)], env=env,
                         capture_output=True, text=True, timeout=300)
    if out.returncode != 0:
        sys.exit(f"FAIL: {script} {store} {steps} exited {out.returncode}\n{out.stdout}{out.stderr}")


def same(a, b, where):
    if isinstance(a, torch.Tensor):
        if not (isinstance(b, torch.Tensor) and a.dtype == b.dtype and a.shape == b.shape and
                a.reshape(-1).view(torch.uint8).equal(b.reshape(-1).view(torch.uint8))):
            sys.exit(f"FAIL: {where} differs between the uninterrupted and the resumed run")
    elif isinstance(a, dict):
        if set(a) != set(b):
            sys.exit(f"FAIL: {where}: keys {sorted(map(str, a))} != {sorted(map(str, b))}")
        for k in a:
            same(a[k], b[k], f"{where}.{k}")
    elif isinstance(a, (list, tuple)):
        if len(a) != len(b):
            sys.exit(f"FAIL: {where}: lengths differ")
        for i, (x, y) in enumerate(zip(a, b)):
            same(x, y, f"{where}.{i}")
    elif a != b:
        sys.exit(f"FAIL: {where}: {a!r} != {b!r}")


def check(label, code, tmp):
    script = os.path.join(tmp, "train.py")
    with open(script, "w", encoding="utf-8") as f:
        f.write(code + "\n")
    ref, resumed = os.path.join(tmp, "ref"), os.path.join(tmp, "resumed")
    run(script, ref, 30)
    run(script, resumed, 20)
    run(script, resumed, 30)  # a fresh process: fresh model and optimizer, then the resume
    with libckpt.Store(ref) as a, libckpt.Store(resumed) as b:
        if a.latest_step() != 30 or b.latest_step() != 30:
            sys.exit(f"FAIL: {label}: latest steps {a.latest_step()} and {b.latest_step()}, not 30")
        sa, sb = a.load(30), b.load(30)
    if not sa.get("optim", {}).get("state"):
        sys.exit(f"FAIL: {label}: the checkpoint holds no optimizer state")
    same(sa, sb, label)
    print(f"{label}: resumed after 20 steps = uninterrupted 30 steps, bit for bit "
          f"({sum(1 for _ in iter_tensors(sa))} tensors)")


def iter_tensors(x):
    if isinstance(x, torch.Tensor):
        yield x
    elif isinstance(x, dict):
        for v in x.values():
            yield from iter_tensors(v)
    elif isinstance(x, (list, tuple)):
        for v in x:
            yield from iter_tensors(v)


def main():
    tmp = tempfile.mkdtemp(prefix="libckpt-readme-")
    try:
        for path in ("docs/guide.md", "python/README.md"):
            for i, code in enumerate(blocks(path)):
                if "restore(" not in code:
                    sys.exit(f"FAIL: {path} block {i + 1} does not resume")
                d = os.path.join(tmp, f"{os.path.basename(os.path.dirname(path) or 'top')}{i}")
                os.mkdir(d)
                check(f"{path} block {i + 1}", code, d)
        print("PASS")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
