#!/usr/bin/env python3
"""libckpt against PyTorch Distributed Checkpoint (DCP), side by side, in one run, on the same
state: torch.save, DCP's FileSystemWriter (dcp.save and dcp.async_save), libckpt's own
Store.save / save_async, and libckpt as DCP's storage (LibckptStorageWriter / Reader); loads
through dcp.load from either against Store.restore; 1, 2 and 4 gloo ranks; a full save and a
5%-changed one.  Runs on the torch 2.x virtual environment (tools/venv.sh):

    ~/.cache/libckpt/torch2-venv/bin/python bench/python/dcp_bench.py
    BENCH_DCP_SIZE=64M BENCH_RUNS=1 .../python bench/python/dcp_bench.py          # quick

The state: BENCH_DCP_SIZE (default 1G) of float32 tensors, 16 MiB each (smaller for a small
state), rows x 1024 columns, random contents, plus a small non-tensor entry ({"step": ...,
"config": {...}}).  Each rank holds its rows as a DTensor Shard(0) on a 1-d CPU mesh of the world
(what FSDP2's sharded state dict holds): 1/N of every tensor.  The 5%-changed state: 5% of the
1 MiB blocks of the global tensors (256 rows, libckpt's default chunk; chosen at random, fixed
seed) get +1.0 on every element: 5% of the bytes, in whole chunks.

After a warm-up of every method on a 2 MiB state (not timed: DCP's thread pool, libckpt's groups
and the imports are first-call costs, not a save's), every method, in each run (the order rotates from run to run, so a drifting disk is spread over
all of them), into a fresh directory: save the state (step 1), change it, save again (step 2:
the "5%-changed" save), for the sync savers load step 2 back (page cache of its files dropped
first), compare every tensor bit for bit (not timed), and delete the directory.  Times are the
slowest rank's, from a barrier; the median over BENCH_RUNS runs is reported.

  blocked   until the call lets the caller go on and change its tensors: dcp.async_save's
            return (it stages a copy first), save_async + wait_snapshot() for libckpt
  durable   until the checkpoint is durable: the call's return (dcp.save, Store.save), the
            future's result (dcp.async_save) or wait() (save_async), plus for DCP's files an
            fsync of the checkpoint directory (DCP fsyncs its files and .metadata but not the
            directory holding the rename) and for torch.save an fsync of each file and directory

Environment: BENCH_DCP_SIZE (default 1G), BENCH_RUNS (default 3), BENCH_DCP_WORLDS (default
"1 2 4"), BENCH_DCP_METHODS (default all: torch fs_save fs_async ckpt_save
ckpt_async ckptdcp_save ckptdcp_async), BENCH_DCP_WARMUP=0 (no warm-up), BENCH_DIR (default $B/bench/work), B (default build: results merged into
$B/bench/results.json), BENCH_DCP_OUT (another results file), BENCH_DCP_TIMEOUT (seconds per
world, default 1800).  See bench/README.md ("libckpt against DCP") for every key.
"""

import datetime
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "python"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_vs_ckpt import fsync_dir, parse_size  # noqa: E402  (the Python bench's helpers)

MiB = 1 << 20
COLS = 1024                  # float32 columns: 4 KiB a row
BLOCK_ROWS = MiB // (4 * COLS)  # 256 rows: one 1 MiB chunk
CHANGED = 0.05

# method: (label, saver kind, has a load)
METHODS = {
    "torch": ("torch.save (per-rank files)", "sync", True),
    "fs_save": ("dcp.save, FileSystemWriter", "sync", True),
    "fs_async": ("dcp.async_save, FileSystemWriter", "async", False),
    "ckpt_save": ("libckpt Store.save", "sync", True),
    "ckpt_async": ("libckpt Store.save_async", "async", False),
    "ckptdcp_save": ("dcp.save, LibckptStorageWriter", "sync", True),
    "ckptdcp_async": ("dcp.async_save, LibckptStorageWriter", "async", False),
}
LOAD_LABEL = {"torch": "torch.load (per-rank files)", "fs_save": "dcp.load, FileSystemReader",
              "ckpt_save": "libckpt Store.restore", "ckptdcp_save": "dcp.load, LibckptStorageReader"}


def layout(total):
    """[(name, rows)] of the global state: tensors of 16 MiB (or total/8 for a small state, at
    least one 1 MiB block), rows a multiple of 256 x 4 (every rank's shard is whole chunks at
    N = 1, 2, 4 when a tensor holds 4 blocks or more)."""
    tbytes = max(MiB, min(16 * MiB, total // 8))
    rows = max(BLOCK_ROWS, tbytes // (4 * COLS) // BLOCK_ROWS * BLOCK_ROWS)
    n = max(1, total // (rows * 4 * COLS))
    return [(f"layers.{i}.weight" if i % 2 == 0 else f"layers.{i}.exp_avg", rows) for i in range(n)]


def changed_blocks(lay):
    """The 5% of 1 MiB blocks that change: {name: [first rows]} (global rows)."""
    import torch
    blocks = [(name, b * BLOCK_ROWS) for name, rows in lay for b in range(rows // BLOCK_ROWS)]
    k = max(1, round(CHANGED * len(blocks)))
    g = torch.Generator().manual_seed(26)
    pick = sorted(torch.randperm(len(blocks), generator=g)[:k].tolist())
    out = {}
    for i in pick:
        out.setdefault(blocks[i][0], []).append(blocks[i][1])
    return out, k, len(blocks)


# ----------------------------------------------------------------------------- helpers
def du(path):
    """Bytes of the files under path (their sizes; what a save put on the disk)."""
    n = 0
    for d, _, files in os.walk(path):
        for f in files:
            try:
                n += os.lstat(os.path.join(d, f)).st_size
            except OSError:
                pass
    return n


def evict(path):
    """Drops the (clean, fsynced) page cache of every file under path, so that a load reads
    the disk: DCP's FileSystemReader reads through the page cache, libckpt with O_DIRECT."""
    for d, _, files in os.walk(path):
        for f in files:
            try:
                fd = os.open(os.path.join(d, f), os.O_RDONLY)
            except OSError:
                continue
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)


# ----------------------------------------------------------------------------- one rank
class Rank:
    def __init__(self, rank, world, size, bdir, like=None):
        """This rank's part of the state of `size` bytes; like: a Rank whose mesh and groups
        this one shares (the warm-up's small state)."""
        import torch
        import torch.distributed as dist
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.tensor import DTensor, Shard
        self.torch, self.dist = torch, dist
        self.rank, self.world, self.bdir = rank, world, bdir
        if like is None:
            self.mesh = init_device_mesh("cpu", (world,))
            # DCP's async save runs its collectives on its own thread: a group of its own, so
            # that the barriers and reductions of this bench (default group) never interleave
            self.g_async = dist.new_group(backend="gloo")
        else:
            self.mesh, self.g_async = like.mesh, like.g_async
        self.lay = layout(size)
        self.changes, self.n_changed, self.n_blocks = changed_blocks(self.lay)
        g = torch.Generator().manual_seed(1000 + rank)
        self.state, self.target, self.backup, self.bumped = {}, {}, {}, {}
        self.local_bytes = 0
        for name, rows in self.lay:
            lr = rows // world
            r0 = rank * lr
            local = torch.randn(lr, COLS, generator=g)
            self.local_bytes += local.numel() * 4

            def dt(t):
                return DTensor.from_local(t, self.mesh, [Shard(0)], run_check=False,
                                          shape=torch.Size((rows, COLS)), stride=(COLS, 1))
            self.state[name] = dt(local)
            self.target[name] = dt(torch.zeros(lr, COLS))
            for b in self.changes.get(name, []):
                a, z = max(b, r0) - r0, min(b + BLOCK_ROWS, r0 + lr) - r0
                if a < z:
                    self.backup[(name, a, z)] = local[a:z].clone()
                    self.bumped[(name, a, z)] = local[a:z] + 1.0
        self.state["extra"] = {"step": 100, "config": {"lr": 3e-4, "name": "dcp_bench"}}
        self.target["extra"] = {"step": 0, "config": {"lr": 0.0, "name": ""}}

    def set_changed(self, on):
        src = self.bumped if on else self.backup
        for (name, a, z), v in src.items():
            self.state[name].to_local()[a:z].copy_(v)
        self.state["extra"]["step"] = 101 if on else 100

    def local_state(self, sd):
        return {k: (v.to_local() if hasattr(v, "to_local") else v) for k, v in sd.items()}

    def check_loaded(self, what):
        """The target holds the state (bit for bit), then is zeroed for the next load."""
        for k, v in self.state.items():
            t = self.target[k]
            if k == "extra":
                if t != v:
                    raise SystemExit(f"dcp_bench: {what}: {k} is {t!r}, saved {v!r}")
                self.target[k] = {"step": 0, "config": {"lr": 0.0, "name": ""}}
                continue
            a, b = v.to_local(), t.to_local()
            if not self.torch.equal(a.view(self.torch.int32), b.view(self.torch.int32)):
                raise SystemExit(f"dcp_bench: {what}: rank {self.rank}: {k} differs from the "
                                 f"saved tensor")
            b.zero_()

    def barrier(self):
        self.dist.barrier()

    def floors(self):
        """The CPU's limits on this state, every rank at once: a copy of its local tensors into
        buffers allocated outside the timing (what any staging must do at least; DCP's stager
        does this copy, with torch's threads), and XXH3-128 over them with Debian's libxxhash
        on cpus/N threads a rank (what any incremental save must do at least: every byte is
        read to learn that it did not change). Each is timed from a barrier to a barrier after
        the work, so that it is the wall time of all the ranks, not of each rank alone."""
        import ctypes
        from concurrent.futures import ThreadPoolExecutor

        class H128(ctypes.Structure):
            _fields_ = [("lo", ctypes.c_uint64), ("hi", ctypes.c_uint64)]
        xx = ctypes.CDLL("libxxhash.so.0")
        xx.XXH3_128bits.restype = H128
        xx.XXH3_128bits.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
        local = [v.to_local() for k, v in self.state.items() if k != "extra"]
        dst = [self.torch.empty_like(t).fill_(0.0) for t in local]
        nthreads = max(1, (os.cpu_count() or 1) // self.world)

        def hash_some(i):  # ctypes releases the GIL: the threads hash in parallel
            for t in local[i::nthreads]:
                xx.XXH3_128bits(t.data_ptr(), t.numel() * t.element_size())

        def timed(fn):
            self.barrier()
            t0 = time.perf_counter()
            fn()
            self.barrier()
            return time.perf_counter() - t0

        def copy():
            for a, b in zip(dst, local):
                a.copy_(b)
        t_copy = timed(copy)
        del dst
        with ThreadPoolExecutor(nthreads) as pool:
            t_hash = timed(lambda: list(pool.map(hash_some, range(nthreads))))
        return dict(zip(("floor_copy_seconds", "floor_hash_seconds"),
                        self.slowest([t_copy, t_hash])))

    def slowest(self, vals):
        """The largest of each value over the ranks (float64 all_reduce MAX)."""
        t = self.torch.tensor(vals, dtype=self.torch.float64)
        self.dist.all_reduce(t, op=self.dist.ReduceOp.MAX)
        return t.tolist()

    def total(self, vals):
        t = self.torch.tensor(vals, dtype=self.torch.float64)
        self.dist.all_reduce(t, op=self.dist.ReduceOp.SUM)
        return t.tolist()

    # ------------------------------------------------------------- the savers: (blocked, durable)
    def save(self, method, d, step, ctx):
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint import FileSystemWriter
        from libckpt.dcp import LibckptStorageWriter
        torch = self.torch
        t0 = time.perf_counter()
        if method == "torch":
            f = os.path.join(d, f"step-{step}", f"rank{self.rank}.pt")
            os.makedirs(os.path.dirname(f), exist_ok=True)
            with open(f, "wb") as fh:
                torch.save(self.local_state(self.state), fh)
                fh.flush()
                os.fsync(fh.fileno())
            fsync_dir(os.path.dirname(f))
            fsync_dir(d)
            t = time.perf_counter() - t0
            return t, t
        if method in ("fs_save", "fs_async"):
            cid = os.path.join(d, f"step-{step}")
            w = FileSystemWriter(cid)
            if method == "fs_save":
                dcp.save(self.state, storage_writer=w, checkpoint_id=cid)
                t1 = time.perf_counter()
            else:
                fut = dcp.async_save(self.state, storage_writer=w, checkpoint_id=cid,
                                     process_group=self.g_async)
                t1 = time.perf_counter()
                fut.result()
            if self.rank == 0:  # the rename of .metadata, made durable
                fsync_dir(cid)
                fsync_dir(d)
            return t1 - t0, time.perf_counter() - t0
        if method in ("ckpt_save", "ckpt_async"):
            st = ctx["store"]
            if method == "ckpt_save":
                ctx["stats"] = st.save(self.state, step)
                t = time.perf_counter() - t0
                return t, t
            h = st.save_async(self.state, step)
            h.wait_snapshot()
            t1 = time.perf_counter()
            ctx["stats"] = h.wait()
            return t1 - t0, time.perf_counter() - t0
        if method in ("ckptdcp_save", "ckptdcp_async"):
            cid = f"{d}/step-{step}"
            w = ctx.get("writer") or LibckptStorageWriter(d)
            if method == "ckptdcp_save":
                dcp.save(self.state, storage_writer=w, checkpoint_id=cid)
                t1 = time.perf_counter()
            else:
                fut = dcp.async_save(self.state, storage_writer=w, checkpoint_id=cid,
                                     process_group=self.g_async)
                t1 = time.perf_counter()
                fut.result()
            ctx["stats"] = w.last_stats
            return t1 - t0, time.perf_counter() - t0
        raise ValueError(method)

    def load(self, method, d, step):
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint import FileSystemReader
        from libckpt.dcp import LibckptStorageReader
        if self.rank == 0:
            evict(d)
        self.barrier()
        t0 = time.perf_counter()
        if method == "torch":
            f = os.path.join(d, f"step-{step}", f"rank{self.rank}.pt")
            with open(f, "rb") as fh:
                got = self.torch.load(fh)
            loaded = self.local_state(self.target)
            for k, v in got.items():
                if k == "extra":
                    self.target[k] = v
                else:
                    loaded[k].copy_(v)  # into the target, as dcp.load fills it
            del got
        elif method == "fs_save":
            cid = os.path.join(d, f"step-{step}")
            dcp.load(self.target, storage_reader=FileSystemReader(cid), checkpoint_id=cid)
        elif method == "ckptdcp_save":
            cid = f"{d}/step-{step}"
            dcp.load(self.target, storage_reader=LibckptStorageReader(d), checkpoint_id=cid)
        elif method == "ckpt_save":
            import libckpt
            with libckpt.Store(d, read_only=True) as st:
                st.restore(self.target, step)
        return time.perf_counter() - t0

    def prepare(self, method, d, ctx):
        """Before a method's first save, outside the timing (a subclass's own set-up)."""

    def saved(self, method, out, ctx):
        """After a method's saves, before its load (a subclass's own figures into out)."""

    def run_method(self, method, run, tag="dcp"):
        """Full save, 5%-changed save, load (sync savers); returns this method's figures."""
        import libckpt
        d = os.path.join(self.bdir, f"{tag}-{method}-{self.world}")
        if self.rank == 0:
            shutil.rmtree(d, ignore_errors=True)
            os.makedirs(d)
        self.barrier()
        ctx = {}
        if method in ("ckpt_save", "ckpt_async"):
            # one store for the run, as a training job keeps it; its pinned pool is allocated
            # outside the timing (reserve: the state plus two I/O buffers)
            ctx["store"] = libckpt.Store(d, create=True)
            ctx["pool_bytes"] = ctx["store"].reserve(self.state)
        if method in ("ckptdcp_save", "ckptdcp_async"):
            # the same for libckpt as DCP's backend: one writer for the run (it keeps its store
            # and pool), the pool reserved outside the timing
            from libckpt.dcp import LibckptStorageWriter
            if self.rank == 0:
                libckpt.Store(d, create=True).close()
            self.barrier()
            ctx["writer"] = LibckptStorageWriter(d)
            ctx["pool_bytes"] = ctx["writer"].reserve(self.state)
        self.prepare(method, d, ctx)
        out = {}
        try:
            for step, tag in ((1, ""), (2, "incr5_")):
                if step == 2:
                    self.set_changed(True)
                before = du(d) if self.rank == 0 else 0
                self.barrier()
                blocked, durable = self.save(method, d, step, ctx)
                blocked, durable = self.slowest([blocked, durable])
                self.barrier()
                if METHODS[method][1] == "async":
                    out[tag + "blocked_seconds"] = blocked
                out[tag + "durable_seconds"] = durable
                if self.rank == 0:
                    out[tag + "bytes"] = du(d) - before
                stats = ctx.pop("stats", None)
                if stats is not None:
                    bw = stats["bytes_written"] if isinstance(stats, dict) else stats.bytes_written
                    out[tag + "bytes_written"] = self.total([bw])[0]
            self.saved(method, out, ctx)
            if METHODS[method][2]:
                if "store" in ctx:
                    ctx.pop("store").close()
                out["load_seconds"] = self.slowest([self.load(method, d, 2)])[0]
                self.check_loaded(f"{method} load of step 2, run {run + 1}")
        finally:
            self.set_changed(False)
            if "store" in ctx:
                ctx["store"].close()
            if "writer" in ctx:
                ctx["writer"].close()
            if "close" in ctx:
                ctx.pop("close")()
            self.barrier()
            if self.rank == 0:
                shutil.rmtree(d, ignore_errors=True)
        return out


def rank_main(argv):
    import torch.distributed as dist
    rank, world, init, size, runs, bdir, outp = (int(argv[2]), int(argv[3]), argv[4],
                                                   parse_size(argv[5]), int(argv[6]), argv[7],
                                                   argv[8])
    dist.init_process_group("gloo", init_method="file://" + init, rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=600))
    try:
        import warnings
        warnings.filterwarnings("ignore", message="TypedStorage is deprecated")
        r = Rank(rank, world, size, bdir)
        names = [m for m in METHODS if m in os.environ.get("BENCH_DCP_METHODS", m).split()]
        # A warm-up of every method on a 2 MiB state, not timed: the first call's costs (DCP's
        # thread pool, libckpt's library and groups, imports) are not a save's
        if os.environ.get("BENCH_DCP_WARMUP", "1") != "0":
            w = Rank(rank, world, 2 * MiB, bdir, like=r)
            for m in names:
                w.run_method(m, 0, tag="warmup")
            del w
        samples = {}
        for run in range(runs):
            order = names[run % len(names):] + names[:run % len(names)]
            for k, v in r.floors().items():
                samples.setdefault(k, []).append(v)
            for m in order:
                for k, v in r.run_method(m, run).items():
                    samples.setdefault(f"{m}_{k}", []).append(v)
            if rank == 0:
                print(f"N={world} run {run + 1}/{runs}: " + ", ".join(
                    f"{k.replace('_seconds', '')} {v[-1]:.3f}s" for k, v in samples.items()
                    if k.endswith("_seconds")), flush=True)
        if rank == 0:
            with open(outp, "w") as f:
                json.dump({"samples": samples, "local_bytes": r.local_bytes,
                           "state_bytes": r.local_bytes * world, "tensors": len(r.lay),
                           "tensor_rows": r.lay[0][1], "changed_blocks": r.n_changed,
                           "blocks": r.n_blocks}, f)
    finally:
        dist.destroy_process_group()


# ----------------------------------------------------------------------------- the driver
def run_world(n, size, runs, bdir, timeout, script=None, env=None):
    """The bench on n rank processes; rank 0's samples (exits naming the rank on a failure).
    script: the program each rank runs as `script --rank R N INIT SIZE RUNS DIR OUT` (default
    this one; bench/python/peers_bench.py runs its own ranks), env: more environment for them."""
    tmp = tempfile.mkdtemp(prefix="dcp-bench-")
    init, outp = os.path.join(tmp, "init"), os.path.join(tmp, "out.json")
    env = dict(os.environ, GLOO_SOCKET_IFNAME="lo", **(env or {}))
    script = os.path.abspath(script or __file__)
    procs = [subprocess.Popen([sys.executable, script, "--rank", str(r), str(n),
                               init, str(size), str(runs), bdir, outp], env=env,
                              stdout=subprocess.PIPE if r else None, stderr=subprocess.STDOUT,
                              text=True) for r in range(n)]
    try:
        outs = []
        deadline = time.monotonic() + timeout
        for p in procs:
            out, _ = p.communicate(timeout=max(1, deadline - time.monotonic()))
            outs.append((p.returncode, out))
        for r, (rc, out) in enumerate(outs):
            if rc != 0:
                sys.exit(f"dcp_bench: N={n}: rank {r} exited {rc}" + (f":\n{out}" if out else ""))
        with open(outp) as f:
            return json.load(f)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        shutil.rmtree(tmp, ignore_errors=True)
        for m in METHODS:  # what a killed rank 0 left
            for tag in ("dcp", "warmup"):
                shutil.rmtree(os.path.join(bdir, f"{tag}-{m}-{n}"), ignore_errors=True)


def figures(n, got):
    """results.json keys of world n (medians, ratios)."""
    med = {k: statistics.median(v) for k, v in got["samples"].items()}
    res = {f"dcp_{k}_{n}": v for k, v in med.items()}

    def ratio(key, a, b):
        if a in med and b in med and med[b] > 0:
            res[f"dcp_{key}_{n}"] = med[a] / med[b]
    # the goals: libckpt's own API, and libckpt as DCP's storage, against DCP's FileSystemWriter
    ratio("blocked_vs_async", "ckpt_async_blocked_seconds", "fs_async_blocked_seconds")
    ratio("durable_vs_save", "ckpt_save_durable_seconds", "fs_save_durable_seconds")
    ratio("incr5_vs_save", "ckpt_save_incr5_durable_seconds", "fs_save_incr5_durable_seconds")
    ratio("backend_blocked_vs_async", "ckptdcp_async_blocked_seconds", "fs_async_blocked_seconds")
    ratio("backend_durable_vs_save", "ckptdcp_save_durable_seconds", "fs_save_durable_seconds")
    ratio("backend_incr5_vs_save", "ckptdcp_save_incr5_durable_seconds",
          "fs_save_incr5_durable_seconds")
    ratio("async_durable_vs_async", "ckpt_async_durable_seconds", "fs_async_durable_seconds")
    ratio("load_vs_dcp", "ckpt_save_load_seconds", "fs_save_load_seconds")
    # against the CPU's limits in the same run (floors): the snapshot against a copy, the
    # 5%-changed save against hashing every byte
    ratio("blocked_vs_copy_floor", "ckpt_async_blocked_seconds", "floor_copy_seconds")
    ratio("backend_blocked_vs_copy_floor", "ckptdcp_async_blocked_seconds", "floor_copy_seconds")
    ratio("incr5_vs_hash_floor", "ckpt_save_incr5_durable_seconds", "floor_hash_seconds")
    ratio("backend_incr5_vs_hash_floor", "ckptdcp_save_incr5_durable_seconds",
          "floor_hash_seconds")
    ratio("backend_load_vs_dcp", "ckptdcp_save_load_seconds", "fs_save_load_seconds")
    res[f"dcp_samples_{n}"] = got["samples"]
    return res


def table(res, worlds):
    """The side-by-side table: rows methods, columns per N: blocked, durable, 5%-changed
    durable (and its written bytes), load."""
    def f(k):
        v = res.get(k)
        return "%7.3f" % v if isinstance(v, (int, float)) else "%7s" % "-"
    hdr = "%-38s" % "seconds (median)" + "".join(
        " | N=%d %7s %7s %7s %7s %7s" % (n, "blocked", "durable", "5% blk", "5% dur", "load")
        for n in worlds)
    lines = [hdr, "-" * len(hdr)]
    for m, (label, _, has_load) in METHODS.items():
        row = "%-38s" % label
        for n in worlds:
            row += " |     " + " ".join(f(f"dcp_{m}_{k}_{n}") for k in (
                "blocked_seconds", "durable_seconds", "incr5_blocked_seconds",
                "incr5_durable_seconds", "load_seconds"))
        lines.append(row)
    row = "%-38s" % "CPU floor: copy / XXH3 of the state"
    for n in worlds:
        row += " |     " + f(f"dcp_floor_copy_seconds_{n}") + " " + \
            f(f"dcp_floor_hash_seconds_{n}") + " " * 24
    lines.append(row)
    lines.append("")
    lines.append("%-38s" % "MiB on disk: full / 5%-changed" + "".join(
        " | N=%d" % n + " " * 40 for n in worlds))
    for m, (label, _, _) in METHODS.items():
        row = "%-38s" % label
        for n in worlds:
            a, b = res.get(f"dcp_{m}_bytes_{n}"), res.get(f"dcp_{m}_incr5_bytes_{n}")
            row += " |     " + ("%9.1f / %9.1f" % (a / MiB, b / MiB) if a is not None and
                                b is not None else "%21s" % "-") + " " * 19
        lines.append(row)
    return "\n".join(lines)


def main():
    size = parse_size(os.environ.get("BENCH_DCP_SIZE", "1G"))
    runs = int(os.environ.get("BENCH_RUNS", "3"))
    worlds = [int(x) for x in os.environ.get("BENCH_DCP_WORLDS", "1 2 4").split()]
    b = os.environ.get("B", "build")
    bdir = os.path.abspath(os.environ.get("BENCH_DIR", os.path.join(ROOT, b, "bench", "work")))
    results_path = os.environ.get("BENCH_DCP_OUT") or os.path.join(ROOT, b, "bench", "results.json")
    timeout = float(os.environ.get("BENCH_DCP_TIMEOUT", "1800"))
    os.makedirs(bdir, exist_ok=True)
    # a TERM (a test's timeout, kill) unwinds run_world's finally: the ranks are killed with it
    signal.signal(signal.SIGTERM, lambda *_: sys.exit("dcp_bench: terminated"))
    import torch
    import libckpt
    load0 = list(os.getloadavg())
    print(f"dcp_bench: state {size / MiB:.0f} MiB of float32 ({len(layout(size))} tensors, "
          f"Shard(0) DTensors), worlds {worlds}, {runs} runs, directory {bdir}; torch "
          f"{torch.__version__}, libckpt {libckpt.library_version()} from "
          f"{libckpt.library_path()}; load average {load0[0]:.2f}", flush=True)
    res = {}
    info = None
    for n in worlds:
        got = run_world(n, size, runs, bdir, timeout)
        info = got
        res.update(figures(n, got))
    res.update({
        "dcp_bench_time": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "dcp_bench_dir": bdir, "dcp_state_bytes": info["state_bytes"], "dcp_tensors": info["tensors"],
        "dcp_tensor_rows": info["tensor_rows"], "dcp_runs": runs, "dcp_worlds": worlds,
        "dcp_incr5_changed_blocks": info["changed_blocks"], "dcp_blocks": info["blocks"],
        "dcp_torch_version": torch.__version__, "dcp_cpus": os.cpu_count(),
        "dcp_load_avg_start": load0, "dcp_load_avg_end": list(os.getloadavg()),
    })
    print()
    print(table(res, worlds))
    print()
    for n in worlds:
        print(f"N={n}: " + ", ".join(f"{k} {res[f'dcp_{k}_{n}']:.3f}" for k in (
            "blocked_vs_async", "durable_vs_save", "incr5_vs_save", "backend_blocked_vs_async",
            "backend_durable_vs_save", "backend_incr5_vs_save", "load_vs_dcp",
            "backend_load_vs_dcp", "blocked_vs_copy_floor", "backend_blocked_vs_copy_floor",
            "incr5_vs_hash_floor", "backend_incr5_vs_hash_floor") if f"dcp_{k}_{n}" in res))
    print(f"load average {load0[0]:.2f} at start, {res['dcp_load_avg_end'][0]:.2f} at end "
          f"({os.cpu_count()} CPUs)")
    old = {}
    if os.path.exists(results_path):
        try:
            with open(results_path) as f:
                old = json.load(f)
        except (OSError, ValueError):
            old = {}
    old = {k: v for k, v in old.items() if not k.startswith("dcp_")}  # this run's replace them
    old.update(res)
    os.makedirs(os.path.dirname(os.path.abspath(results_path)), exist_ok=True)
    tmp = results_path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(old, f, indent=1, sort_keys=True)
    os.replace(tmp, results_path)
    print(f"dcp_bench: {len(res)} dcp_* keys merged into {results_path}")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--rank":
        rank_main(sys.argv)
    else:
        main()
