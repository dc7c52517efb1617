#!/usr/bin/env python3
"""DTensor leaves (torch 2.x): 4 gloo ranks on a CPU device mesh save DTensors placed Shard(0)
(an uneven split too), Replicate, and [Shard(0), Replicate()] on a 2x2 mesh (boxes held by two
ranks, saved once), as they are (no wrapping); restore into DTensors placed Shard(1) on 4 ranks
and on a 2-rank mesh; one process loads the global tensors.

Always checks libckpt.dist.placement_box (the split rule used where torch lacks its own). On a
torch without DTensor (Debian 12's 1.13) it checks that the DTensor call path says so clearly,
prints that message as its skip reason and exits 77 (tests/python/t-python-dtensor.sh checks the
message).
"""

import datetime
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "python"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


class _P:
    """A placement as placement_box reads one."""

    def __init__(self, dim=None):
        self.dim = dim

    def is_shard(self):
        return self.dim is not None

    def is_replicate(self):
        return self.dim is None


def check_placement_box():
    from libckpt.dist import placement_box
    # 10 rows on 4 ranks: torch.chunk gives 3, 3, 3, 1
    got = [placement_box((10, 3), [4], [r], [_P(0)]) for r in range(4)]
    assert got == [((0, 0), (3, 3)), ((3, 0), (3, 3)), ((6, 0), (3, 3)), ((9, 0), (1, 3))], got
    # 5 rows on 4 ranks: 2, 2, 1, 0 (an empty box at the end)
    got = [placement_box((5,), [4], [r], [_P(0)])[1] for r in range(4)]
    assert got == [(2,), (2,), (1,), (0,)], got
    # 2x2 mesh, [Shard(0), Shard(0)]: nested, as torch splits it
    got = [placement_box((8, 2), [2, 2], [i, j], [_P(0), _P(0)])[0] for i in (0, 1) for j in (0, 1)]
    assert got == [(0, 0), (2, 0), (4, 0), (6, 0)], got
    # [Shard(1), Replicate()]
    assert placement_box((4, 6), [2, 2], [1, 0], [_P(1), _P()]) == ((0, 3), (4, 3))
    print("ok: placement_box splits as torch.chunk does")


def check_absent():
    import torch
    import libckpt
    try:
        libckpt.Shard.from_dtensor(torch.zeros(2))
    except libckpt.UnsupportedError as e:
        msg = str(e)
    else:
        sys.exit("FAIL: Shard.from_dtensor did not raise without DTensor")
    want = f"DTensor is not available in torch {torch.__version__}"
    if not msg.startswith(want) or "libckpt.Shard" not in msg:
        sys.exit(f"FAIL: unclear message without DTensor: {msg!r}")
    print(f"skip: {msg}")
    return 77


def globals_():
    import torch
    return {"rows": torch.arange(8 * 12, dtype=torch.float32).reshape(8, 12),
            "uneven": torch.arange(10 * 3, dtype=torch.int64).reshape(10, 3),
            "rep": torch.linspace(0, 1, 64, dtype=torch.float32),
            "mesh2d": torch.arange(8 * 6, dtype=torch.float32).reshape(8, 6) - 7}


def role(store, rank, world, what):
    import torch
    import torch.distributed as dist
    import libckpt
    m = libckpt.dtensor_module()
    Shard, Replicate = m.Shard, m.Replicate
    mesh = m.DeviceMesh("cpu", list(range(world)))
    g = globals_()
    if what == "save":
        mesh2 = m.DeviceMesh("cpu", [[0, 1], [2, 3]])
        state = {"rows": m.distribute_tensor(g["rows"], mesh, [Shard(0)]),
                 "uneven": m.distribute_tensor(g["uneven"], mesh, [Shard(0)]),
                 "rep": m.distribute_tensor(g["rep"], mesh, [Replicate()]),
                 "mesh2d": m.distribute_tensor(g["mesh2d"], mesh2, [Shard(0), Replicate()])}
        with libckpt.Store(store) as st:
            st.save(state, 1)
    else:  # restore, by columns, on this world
        tgt = {k: m.distribute_tensor(torch.zeros_like(v), mesh, [Shard(1) if v.dim() > 1 else Replicate()])
               for k, v in g.items()}
        with libckpt.Store(store, read_only=True) as st:
            st.restore(tgt, 1)
        for k, v in g.items():
            assert torch.equal(tgt[k].full_tensor(), v), f"{k}: restored DTensor differs"
    dist.barrier()
    print("RESULT " + json.dumps({"rank": rank, "ok": True}), flush=True)


def run_world(n, store, what):
    import test_dist
    fd, init = tempfile.mkstemp(prefix="ckpt-init-")
    os.close(fd)
    os.unlink(init)
    procs = [subprocess.Popen([sys.executable, __file__, "--rank", str(r), str(n), init, store, what],
                              env=dict(os.environ, GLOO_SOCKET_IFNAME="lo"), stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True) for r in range(n)]
    for r, p in enumerate(procs):
        out, _ = p.communicate(timeout=8 * test_dist.TIMEOUT + 120)
        if p.returncode != 0 or "RESULT " not in out:
            for q in procs:
                q.kill()
            sys.exit(f"FAIL: {what} on {n} ranks: rank {r} exited {p.returncode}:\n{out}")
    print(f"ok: DTensors {what} on {n} ranks")


def main():
    import torch
    import libckpt
    check_placement_box()
    if libckpt.dtensor_module() is None:
        return check_absent()
    with tempfile.TemporaryDirectory() as tmp:
        store = os.path.join(tmp, "store")
        libckpt.Store(store, create=True, chunk_size="64K").close()
        run_world(4, store, "save")
        with libckpt.Store(store, read_only=True) as st:
            got = st.load(1)
        for k, v in globals_().items():
            assert torch.equal(got[k], v), f"load: {k} differs"
        print("ok: Store.load gives the DTensors' global tensors")
        run_world(4, store, "restore")
        run_world(2, store, "restore")
    print("python dtensor ok")
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--rank":
        import torch.distributed as dist
        rank, world, init, store, what = int(sys.argv[2]), int(sys.argv[3]), *sys.argv[4:7]
        dist.init_process_group("gloo", init_method="file://" + init, rank=rank, world_size=world,
                                timeout=datetime.timedelta(seconds=20))
        role(store, rank, world, what)
        dist.destroy_process_group()
        sys.exit(0)
    sys.exit(main())
