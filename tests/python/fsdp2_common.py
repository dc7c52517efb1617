"""Shared by tests/python/test_dcp.py and test_fsdp2.py (torch 2.x: the torch2 virtual
environment): a small model trained under FSDP2 (fully_shard) on a CPU device mesh over gloo, its
full (consolidated) state for comparisons, and a launcher that runs one role of a test file on N
ranks (processes started with --rank; init_method file://, so no port is ever picked)."""

import datetime
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TIMEOUT = 30  # the group's timeout (seconds)


def build(world, seed=0):
    """The model (sizes that split unevenly over 4 ranks and span several 64 KiB chunks), each
    Linear and the root fully_shard-ed on a 1-d CPU mesh of `world` ranks, and its AdamW."""
    import torch
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    torch.manual_seed(seed)
    m = torch.nn.Sequential(torch.nn.Linear(64, 301), torch.nn.ReLU(), torch.nn.Linear(301, 64),
                            torch.nn.ReLU(), torch.nn.Linear(64, 5))
    mesh = init_device_mesh("cpu", (world,))
    for layer in m:
        if isinstance(layer, torch.nn.Linear):
            fully_shard(layer, mesh=mesh)
    fully_shard(m, mesh=mesh)
    opt = torch.optim.AdamW(m.parameters(), lr=1e-2)
    return m, opt


def train(m, opt, steps, seed):
    """`steps` optimizer steps on batches drawn from `seed` (the same on every rank)."""
    import torch
    g = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        x = torch.randn(16, 64, generator=g)
        loss = m(x).square().mean()
        opt.zero_grad()
        loss.backward()
        opt.step()


def sharded_state(m, opt):
    """{"model": ..., "optim": ...} as get_state_dict gives them (DTensor leaves)."""
    from torch.distributed.checkpoint.state_dict import get_state_dict
    msd, osd = get_state_dict(m, opt)
    return {"model": msd, "optim": osd}


def apply_state(m, opt, state):
    from torch.distributed.checkpoint.state_dict import set_state_dict
    set_state_dict(m, opt, model_state_dict=state["model"], optim_state_dict=state["optim"])


def full_state(m, opt):
    """The consolidated state (plain CPU tensors, every rank), flattened to {dotted name: value}."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict
    msd, osd = get_state_dict(m, opt, options=StateDictOptions(full_state_dict=True,
                                                               cpu_offload=True))
    out = {}

    def walk(prefix, v):
        if isinstance(v, dict):
            for k, x in v.items():
                walk(f"{prefix}.{k}", x)
        elif isinstance(v, (list, tuple)):
            for i, x in enumerate(v):
                walk(f"{prefix}.{i}", x)
        else:
            out[prefix] = v
    walk("model", msd)
    walk("optim", osd)
    return out


def same_state(a, b, what):
    """Raises AssertionError naming the first entry where a and b differ (tensors bit for bit)."""
    import torch
    assert sorted(a) == sorted(b), f"{what}: entries differ: {sorted(set(a) ^ set(b))[:5]}"
    for k in a:
        x, y = a[k], b[k]
        if isinstance(x, torch.Tensor):
            assert isinstance(y, torch.Tensor) and x.dtype == y.dtype and x.shape == y.shape, \
                f"{what}: {k}: {x.dtype}{list(x.shape)} vs {getattr(y, 'dtype', type(y))}"
            assert torch.equal(x.view(-1).view(torch.uint8) if x.numel() else x,
                               y.view(-1).view(torch.uint8) if y.numel() else y), \
                f"{what}: {k} differs"
        else:
            assert x == y, f"{what}: {k}: {x!r} != {y!r}"


def init_rank(argv):
    """In a rank process (argv: --rank R N INIT ...): joins the gloo group; returns the rest."""
    import torch.distributed as dist
    rank, world, init = int(argv[2]), int(argv[3]), argv[4]
    dist.init_process_group("gloo", init_method="file://" + init, rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=TIMEOUT))
    return rank, world, argv[5:]


def run_world(script, n, args, expect_ok=True, timeout=None):
    """Runs `script --rank R n INIT args...` on n ranks; returns their outputs.  expect_ok: exits
    (naming the rank, with every output) unless every rank exited 0 and printed "RESULT ok"."""
    fd, init = tempfile.mkstemp(prefix="ckpt-init-")
    os.close(fd)
    os.unlink(init)
    env = dict(os.environ, GLOO_SOCKET_IFNAME="lo")
    procs = [subprocess.Popen([sys.executable, script, "--rank", str(r), str(n), init, *args],
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for r in range(n)]
    outs = []
    try:
        for p in procs:
            out, _ = p.communicate(timeout=timeout or 4 * TIMEOUT + 60)
            outs.append((p.returncode, out))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        if os.path.exists(init):
            os.unlink(init)
    if expect_ok:
        for r, (rc, out) in enumerate(outs):
            if rc != 0 or "RESULT ok" not in out:
                sys.exit(f"FAIL: {' '.join(args)} on {n} ranks: rank {r} exited {rc}:\n"
                         + "\n".join(f"--- rank {i}\n{o}" for i, (_, o) in enumerate(outs)))
    return outs


def result_line(out, key):
    """The value printed by a rank as 'KEY value' (the last such line)."""
    vals = [ln.split(" ", 1)[1] for ln in out.splitlines() if ln.startswith(key + " ")]
    assert vals, f"no {key} line in:\n{out}"
    return vals[-1]


def print_ok(outs):
    """Prints rank 0's findings (its "ok: ..." lines) from run_world's outputs."""
    for line in outs[0][1].splitlines():
        if line.startswith("ok: "):
            print(line)


def entry(rank_main, main):
    """A test script's entry: a rank process (argv --rank ...: rank_main(argv)) or the test."""
    if len(sys.argv) > 1 and sys.argv[1] == "--rank":
        rank_main(sys.argv)
        sys.exit(0)
    sys.exit(main())
