#!/usr/bin/env python3
"""libckpt side by side with the tools a user would pick instead, on the same state and directory,
in one run (`make bench-peers`; bench/README.md, "libckpt against its peers"):

  file  one process, a state of each size in BENCH_PEERS_SIZES (default "1G 4G"): DeepSpeed's
        FastPersist (deepspeed.io.FastFileWriter as torch.save's file: DeepNVMe's async_io op,
        O_DIRECT, a pinned double buffer; its reads: the aio handle's O_DIRECT pread of the file,
        then torch.load of the bytes), torch.save / torch.load, dcp.save / dcp.load with
        FileSystemWriter / Reader, against libckpt's Store.save, Store.save_async and
        Store.restore: durable time and GB/s, blocked time of the async ones, load time.
  dcp   1, 2 and 4 gloo ranks (BENCH_PEERS_WORLDS), a state of BENCH_PEERS_DCP_SIZE (default the
        first size) as Shard(0) DTensors (bench/python/dcp_bench.py's Rank: the same state, the
        same 5%-changed save): dcp.async_save with FileSystemWriter's own staging, with torch's
        DefaultStager (pinned memory and shared memory on where the machine allows, async
        staging) on DCP's thread and on its checkpoint process (AsyncCheckpointerType.PROCESS),
        against Store.save_async and libckpt as DCP's storage (libckpt.dcp, dcp.async_save):
        blocked, durable, 5%-changed blocked and durable.
  s3    one process, BENCH_PEERS_S3_SIZE (default 2G), a fresh radosgw on loopback for each run
        (tests/s3/rgw.sh): s3torchconnector's DCP S3StorageWriter / S3StorageReader (its README's
        thread_count=8) against `ckptctl push` / `ckptctl pull` of a store holding the same state
        and libckpt's remote tier (Store(remote=...): save + upload until wait_uploaded(); the
        checkpoint restored by a store bound to the remote, without a pull).

Every method runs in a fresh process of its own, each run (the order rotates from run to run), so
that its memory high-water mark is its own: VmHWM of the process (and of its children, DCP's
checkpoint process) is reset through /proc/PID/clear_refs before the method's set-up (pools,
buffers, stagers count) and read after its saves: "peak" is the state's bytes plus what the
save added to the resident set, as a multiple of the state ("peak_x"); the loads the same
("load_peak_x": what the load added, the target not counted).  Every load is compared with the
saved state bit for bit (the bench exits non-zero otherwise); a warm-up of the method on a 2 MiB
state comes first in each process (not timed: imports, DeepSpeed's op, DCP's thread pool and
checkpoint process are first-call costs).  Medians of BENCH_RUNS (default 3).

A peer that cannot be imported or run here stays in the table as "not run" with its error
(results.json: peers_<section>_<method>_status).  The goals (bench/README.md) are computed from
the same run and printed last, one line each starting with PASS, MISS or NOT RUN; results.json
gets every figure as peers_* keys, merged (other keys kept).

Environment: BENCH_PEERS_SIZES, BENCH_RUNS, BENCH_PEERS_WORLDS ("1 2 4"), BENCH_PEERS_DCP_SIZE,
BENCH_PEERS_S3_SIZE, BENCH_PEERS_SECTIONS ("file dcp s3"), BENCH_PEERS_METHODS (all),
BENCH_PEERS_WARMUP=0 (none), BENCH_PEERS_CUDA=1 (the file section on CUDA tensors: the GPU
bundle), BENCH_PEERS_DS_AIO (FastPersist's settings, default DeepSpeed's documented defaults:
"block_size=1M,queue_depth=8,intra_op_parallelism=1,single_submit=0,overlap_events=1,
io_buffer=64M,double_buffer=1"), BENCH_PEERS_TIMEOUT (seconds per process, default 1800), B,
BENCH_DIR, BENCH_PEERS_OUT (another results file).
"""

import datetime
import io
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

MiB = 1 << 20
EXTRA = {"step": 100, "config": {"lr": 3e-4, "name": "peers_bench"}}

# method: (label, async, has a load, a peer of libckpt)
FILE = {
    "torch": ("torch.save / torch.load", False, True, True),
    "fastpersist": ("DeepSpeed FastPersist / DeepNVMe pread", False, True, True),
    "fs_save": ("dcp.save / dcp.load, FileSystem", False, True, True),
    "ckpt_save": ("libckpt Store.save / Store.restore", False, True, False),
    "ckpt_async": ("libckpt Store.save_async", True, False, False),
}
FILE_CUDA = {  # on CUDA tensors (the GPU bundle) DCP's async savers join the file section
    "fs_async": ("dcp.async_save, FileSystemWriter", True, False, True),
    "fs_stager": ("dcp.async_save, DefaultStager", True, False, True),
}
DCP = {
    "fs_async": ("dcp.async_save, FileSystemWriter staging", True, False, True),
    "fs_stager": ("dcp.async_save, DefaultStager, thread", True, False, True),
    "fs_process": ("dcp.async_save, DefaultStager, process", True, False, True),
    "ckpt_async": ("libckpt Store.save_async", True, False, False),
    "ckptdcp_async": ("dcp.async_save, libckpt.dcp writer", True, False, False),
}
S3 = {
    "s3t": ("s3torchconnector DCP writer / reader", False, True, True),
    "ckpt_push": ("ckptctl push / ckptctl pull", False, True, False),
    "ckpt_remote": ("libckpt remote tier: save+upload / restore", False, True, False),
}
FILE_KEYS = ["durable_seconds", "durable_gbps", "peak_bytes", "peak_x"]
FILE_ASYNC_KEYS = ["blocked_seconds", "pool_bytes"]
FILE_LOAD_KEYS = ["load_seconds", "load_gbps", "load_peak_bytes", "load_peak_x"]
DCP_KEYS = ["blocked_seconds", "durable_seconds", "incr5_blocked_seconds", "incr5_durable_seconds",
            "peak_bytes", "peak_x"]
S3_KEYS = ["up_seconds", "up_gbps", "down_seconds", "down_gbps", "peak_bytes", "peak_x",
           "down_peak_bytes", "down_peak_x"]
NEEDS = {"fastpersist": "deepspeed", "s3t": "s3torchconnector"}


def file_methods(cuda):
    return dict(FILE, **FILE_CUDA) if cuda else dict(FILE)


def method_keys(section, m, cuda=False):
    """The figures a method that ran has in results.json (without the prefix and the suffix)."""
    if section == "dcp":
        return DCP_KEYS + (["pool_bytes"] if m in ("ckpt_async", "ckptdcp_async") else [])
    if section == "s3":
        return S3_KEYS
    _, is_async, has_load, _ = file_methods(cuda)[m]
    return FILE_KEYS + (["blocked_seconds"] if is_async else []) + \
        (["pool_bytes"] if m == "ckpt_async" else []) + (FILE_LOAD_KEYS if has_load else [])


# ----------------------------------------------------------------------------- memory
def _status_bytes(pid, field):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def _tree(pid):
    """pid and its descendants (DCP's checkpoint process, a save's helpers)."""
    kids = {}
    for e in os.listdir("/proc"):
        if e.isdigit():
            try:
                with open(f"/proc/{e}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            kids.setdefault(ppid, []).append(int(e))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo += kids.get(p, [])
    return out


class Peak:
    """The resident set a piece of work adds: VmHWM reset (clear_refs 5) for this process and its
    descendants, then the sum over them of the high-water mark less the resident set at the
    reset (a process started after the reset counts whole). Pages shared by two processes (DCP's
    shared-memory staging read by its checkpoint process) count in both: an upper bound."""

    def __init__(self):
        self.reset()

    def reset(self):
        self.base = {}
        for p in _tree(os.getpid()):
            try:
                with open(f"/proc/{p}/clear_refs", "w") as f:
                    f.write("5")
            except OSError:
                continue
            self.base[p] = _status_bytes(p, "VmRSS") or 0

    def extra(self):
        tot = 0
        for p in _tree(os.getpid()):
            hwm = _status_bytes(p, "VmHWM")
            if hwm is not None:
                tot += max(0, hwm - self.base.get(p, 0))
        return tot


# ----------------------------------------------------------------------------- one process
MISMATCH = 3  # a child's exit status when what it loaded is not what it saved


def mismatch(msg):
    """A loaded state that differs from the saved one: the whole bench fails (never a "not run")."""
    print(f"peers_bench: MISMATCH: {msg}", file=sys.stderr, flush=True)
    sys.exit(MISMATCH)


class Plain:
    """A state of plain tensors (the layout of dcp_bench: 16 MiB float32 tensors, random), on
    `device`, and the extra entry."""

    def __init__(self, size, device="cpu", seed=0):
        import torch
        from dcp_bench import layout, COLS
        self.torch, self.device = torch, device
        self.state, self.bytes = {}, 0
        g = torch.Generator().manual_seed(7000 + seed)
        for name, rows in layout(size):
            t = torch.randn(rows, COLS, generator=g)
            self.state[name] = t.to(device) if device != "cpu" else t
            self.bytes += t.numel() * 4
        self.state["extra"] = json.loads(json.dumps(EXTRA))

    def zeros(self):
        t = self.torch
        z = {k: t.zeros_like(v) for k, v in self.state.items() if k != "extra"}
        z["extra"] = {"step": 0, "config": {"lr": 0.0, "name": ""}}
        return z

    def check(self, got, what):
        """got holds the state bit for bit (else the bench stops, naming the tensor).
        PEERS_TEST_FLIP=1 flips one bit of what was loaded first (tests/bench/t-bench-peers.sh:
        the check is not a formality)."""
        t = self.torch
        if os.environ.get("PEERS_TEST_FLIP") == "1":
            k = next(k for k in got if k != "extra")
            got[k].view(t.int32).view(-1)[0] ^= 1
        for k, v in self.state.items():
            g = got.get(k)
            if k == "extra":
                if g != v:
                    mismatch(f"{what}: {k} is {g!r}, saved {v!r}")
            elif g is None or g.shape != v.shape or not t.equal(
                    g.to(v.device).view(t.int32), v.view(t.int32)):
                mismatch(f"{what}: {k} differs from the saved tensor")


def ds_settings():
    """FastPersist's settings: BENCH_PEERS_DS_AIO over DeepSpeed's documented defaults (its "aio"
    section: 1 MiB blocks, queue depth 8, one thread, overlapped events; its checkpoint writer:
    a 64 MiB pinned I/O buffer, double-buffered)."""
    from torch_vs_ckpt import parse_size
    s = {"block_size": "1M", "queue_depth": "8", "intra_op_parallelism": "1",
         "single_submit": "0", "overlap_events": "1", "io_buffer": "64M", "double_buffer": "1"}
    for kv in filter(None, os.environ.get("BENCH_PEERS_DS_AIO", "").split(",")):
        k, v = kv.split("=", 1)
        if k.strip() not in s:
            raise SystemExit(f"peers_bench: BENCH_PEERS_DS_AIO: unknown setting {k!r}")
        s[k.strip()] = v.strip()
    return {k: (parse_size(v) if k in ("block_size", "io_buffer") else int(v)) for k, v in s.items()}


class _ByteCast:
    """DeepSpeed's utils op, as FastFileWriter uses it, where DeepSpeed's CPU accelerator has none
    ("This op had not been implemented on CPU backend"): cast_to_byte_tensor is at::from_blob of
    the tensor's own bytes as uint8 (csrc/utils/tensor_cast.cpp), a view, no copy: the same here
    with torch's view. With CUDA (the GPU bundle) DeepSpeed's own op is used."""

    def load(self, verbose=False):
        return self

    @staticmethod
    def cast_to_byte_tensor(t):
        if isinstance(t, (list, tuple)):
            return [_ByteCast.cast_to_byte_tensor(x) for x in t]
        return t if t.nbytes <= 1 else t.reshape(-1).view(__import__("torch").uint8)


def ds_handle():
    """DeepNVMe's aio handle and FastFileWriter's pinned buffer, as DeepSpeed's checkpoint writer
    factory makes them (once, reused by every save)."""
    os.environ.setdefault("DS_ACCELERATOR", "cuda" if os.environ.get("BENCH_PEERS_CUDA") == "1"
                          else "cpu")
    import torch
    import deepspeed.io.fast_file_writer as ffw
    from deepspeed.ops.op_builder import AsyncIOBuilder
    from deepspeed.accelerator import get_accelerator
    try:
        ffw.UtilsBuilder().load(verbose=False)
    except ValueError:  # the CPU accelerator's "not implemented"
        ffw.UtilsBuilder = _ByteCast
    s = ds_settings()
    h = AsyncIOBuilder().load(verbose=False).aio_handle(
        s["block_size"], s["queue_depth"], bool(s["single_submit"]), bool(s["overlap_events"]),
        s["intra_op_parallelism"])
    buf = get_accelerator().pin_memory(torch.empty(s["io_buffer"], dtype=torch.uint8))
    if torch.cuda.is_available() and not buf.is_pinned():
        buf = buf.pin_memory()
    buf.zero_()
    return h, buf, s


def stager_options():
    """DefaultStager's options: pinned and shared memory and async staging on, as far as this
    machine allows (pinned memory and non-blocking copies need CUDA: off without it, and so
    recorded), and the reason for each one turned off."""
    import torch
    from torch.distributed.checkpoint.staging import StagingOptions, DefaultStager
    cuda = torch.accelerator.is_available()
    why = {}
    opts = {"use_pinned_memory": torch.cuda.is_available(), "use_shared_memory": True,
            "use_async_staging": True, "use_non_blocking_copy": cuda}
    if not cuda:
        why["use_non_blocking_copy"] = "needs an accelerator (asserted by DefaultStager)"
    if not opts["use_pinned_memory"]:
        why["use_pinned_memory"] = "pinning needs CUDA (DefaultStager ignores the flag without it)"
    try:
        st = DefaultStager(StagingOptions(**opts))
        got = st.stage({"probe": torch.ones(4)})
        if hasattr(got, "result"):
            got.result()
        st.close()
    except Exception as e:  # pinned memory without CUDA
        opts["use_pinned_memory"] = False
        why["use_pinned_memory"] = f"{type(e).__name__}: {e}".splitlines()[0][:200]
    return opts, why


def make_stager():
    from torch.distributed.checkpoint.staging import StagingOptions, DefaultStager
    opts, _ = stager_options()
    return DefaultStager(StagingOptions(**opts))


def async_wait(resp, t0):
    """(blocked, durable) of dcp.async_save's answer: a Future (staged before it returned) or an
    AsyncSaveResponse (the caller may change its tensors once staging_completion is done)."""
    if hasattr(resp, "staging_completion"):
        resp.staging_completion.result()
        t1 = time.perf_counter()
        resp.upload_completion.result()
    else:
        t1 = time.perf_counter()
        resp.result()
    return t1 - t0, time.perf_counter() - t0


def file_setup(method, d, st, ctx):
    """A method's set-up, outside the timing but inside its memory figure."""
    import libckpt
    if method in ("ckpt_save", "ckpt_async"):
        # a training job keeps its store and pool: made once, outside the timing (Store.save
        # with libckpt's default pool, save_async with a pool of the state + 2 I/O buffers)
        ctx["store"] = libckpt.Store(d, create=True)
        pool = ctx["store"].reserve(st.state if method == "ckpt_async" else None)
        if method == "ckpt_async":
            ctx["pool_bytes"] = pool
    elif method == "fastpersist":
        ctx["ds"] = ds_handle()
    elif method == "fs_stager":
        ctx["stager"] = make_stager()


def file_save(method, d, state, ctx, step=1):
    """One save of `state` into d by `method`: (blocked, durable) seconds."""
    import torch
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint import FileSystemWriter
    from torch_vs_ckpt import fsync_dir
    t0 = time.perf_counter()
    path = os.path.join(d, f"step-{step}.pt")
    if method == "torch":
        with open(path, "wb") as f:
            torch.save(state, f)
            f.flush()
            os.fsync(f.fileno())
        fsync_dir(d)
    elif method == "fastpersist":
        from deepspeed.io import FastFileWriter, FastFileWriterConfig
        h, buf, s = ctx["ds"]
        w = FastFileWriter(file_path=path, config=FastFileWriterConfig(
            dnvme_handle=h, pinned_tensor=buf, double_buffer=bool(s["double_buffer"]),
            num_parallel_writers=1, writer_rank=0))
        torch.save(state, w)
        w.close()  # drains the buffer, fsyncs the file
        fsync_dir(d)
    elif method in ("fs_save", "fs_async", "fs_stager"):
        cid = os.path.join(d, f"step-{step}")
        w = FileSystemWriter(cid)
        if method == "fs_save":
            dcp.save(state, storage_writer=w, checkpoint_id=cid, no_dist=True)
            t1 = time.perf_counter()
        else:
            resp = dcp.async_save(state, storage_writer=w, checkpoint_id=cid, no_dist=True,
                                  async_stager=ctx.get("stager"))
            t1 = t0 + async_wait(resp, t0)[0]
        fsync_dir(cid)  # the rename of .metadata, made durable
        fsync_dir(d)
        return t1 - t0, time.perf_counter() - t0
    elif method == "ckpt_save":
        ctx["store"].save(state, step)
    elif method == "ckpt_async":
        h = ctx["store"].save_async(state, step)
        h.wait_snapshot()
        t1 = time.perf_counter()
        h.wait()
        return t1 - t0, time.perf_counter() - t0
    else:
        raise ValueError(method)
    t = time.perf_counter() - t0
    return t, t


def file_load(method, d, st, target, ctx, step=1):
    """Loads step `step` back (its page cache dropped first): (seconds, what was loaded)."""
    import torch
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint import FileSystemReader
    from dcp_bench import evict
    import libckpt
    evict(d)
    path = os.path.join(d, f"step-{step}.pt")
    t0 = time.perf_counter()
    if method == "torch":
        got = torch.load(path, map_location=st.device)
    elif method == "fastpersist":
        h, _, s = ctx["ds"]
        n = os.path.getsize(path)
        # DeepNVMe's O_DIRECT read of the file's whole blocks (its last, partial block comes
        # back wrong from sync_pread: read with a plain pread), into its page-locked tensor
        head = n // s["block_size"] * s["block_size"]
        buf = h.new_cpu_locked_tensor(n, torch.empty(0, dtype=torch.uint8))
        try:
            if head:
                h.sync_pread(buf[:head], path)
            with open(path, "rb") as f:
                buf[head:] = torch.frombuffer(bytearray(os.pread(f.fileno(), n - head, head)),
                                              dtype=torch.uint8)
            got = torch.load(io.BytesIO(memoryview(buf.numpy())), map_location=st.device)
        finally:
            h.free_cpu_locked_tensor(buf)
    elif method == "fs_save":
        cid = os.path.join(d, f"step-{step}")
        dcp.load(target, storage_reader=FileSystemReader(cid), checkpoint_id=cid, no_dist=True)
        got = target
    elif method == "ckpt_save":
        ctx.pop("store").close()
        with libckpt.Store(d, read_only=True) as s:
            s.restore(target, step)
        got = target
    else:
        raise ValueError(method)
    return time.perf_counter() - t0, got


def warm_up(fn):
    """fn(Plain of 2 MiB, a scratch directory), not timed, unless BENCH_PEERS_WARMUP=0."""
    if os.environ.get("BENCH_PEERS_WARMUP", "1") == "0":
        return
    d = tempfile.mkdtemp(prefix="peers-warmup-", dir=os.environ["PEERS_DIR"])
    try:
        fn(Plain(2 * MiB, os.environ.get("PEERS_DEVICE", "cpu"), seed=1), d)
    finally:
        shutil.rmtree(d, ignore_errors=True)


def one_file(method, size, d):
    """The file section's child: warm-up, set-up, save, load, check; its figures."""
    device = os.environ.get("PEERS_DEVICE", "cpu")
    has_load = file_methods(device != "cpu")[method][2]

    def cycle(st, dd, ctx, target, peak=None, out=None):
        file_setup(method, dd, st, ctx)
        blocked, durable = file_save(method, dd, st.state, ctx)
        if out is not None:
            out.update(blocked_seconds=blocked, durable_seconds=durable,
                       durable_gbps=st.bytes / durable / 1e9, peak_bytes=st.bytes + peak.extra())
            if "pool_bytes" in ctx:
                out["pool_bytes"] = ctx["pool_bytes"]
            if not file_methods(device != "cpu")[method][1]:
                del out["blocked_seconds"]
            peak.reset()
        if has_load:
            secs, got = file_load(method, dd, st, target, ctx)
            st.check(got, f"{method} load")
            if out is not None:
                out.update(load_seconds=secs, load_gbps=st.bytes / secs / 1e9,
                           load_peak_bytes=peak.extra())
            del got
        if "store" in ctx:
            ctx.pop("store").close()
        if "stager" in ctx:
            ctx.pop("stager").close()

    def target(st):  # the loaders that fill the caller's tensors: the model's, not counted
        return st.zeros() if has_load and method in ("fs_save", "ckpt_save") else None
    warm_up(lambda st, dd: cycle(st, dd, {}, target(st)))
    st = Plain(size, device)
    tgt = target(st)
    peak = Peak()
    out = {}
    cycle(st, d, {}, tgt, peak, out)
    out["peak_x"] = out["peak_bytes"] / st.bytes
    if "load_peak_bytes" in out:
        out["load_peak_x"] = out["load_peak_bytes"] / st.bytes
    return {"figures": out, "state_bytes": st.bytes}


# ----------------------------------------------------------------------------- S3
def s3t_client():
    """s3torchconnector's S3 client on the radosgw of this run (its endpoint; path-style)."""
    from s3torchconnector._s3client import S3Client, S3ClientConfig
    region = os.environ.get("AWS_REGION", "us-east-1")
    cfg = S3ClientConfig(force_path_style=True)
    return region, cfg, lambda: S3Client(region, endpoint=os.environ["AWS_ENDPOINT_URL"],
                                          s3client_config=cfg)


def s3t_save(state, url):
    import torch.distributed.checkpoint as dcp
    from s3torchconnector.dcp import S3StorageWriter
    from s3torchconnector.dcp.s3_file_system import S3FileSystem
    region, cfg, client = s3t_client()
    w = S3StorageWriter(region, url, s3client_config=cfg, thread_count=8)
    w.fs = S3FileSystem(region, s3_client=client())
    w.path = w.fs.init_path(url)
    dcp.save(state, storage_writer=w, no_dist=True)


def s3t_load(target, url):
    import torch.distributed.checkpoint as dcp
    from s3torchconnector import S3ReaderConstructor
    from s3torchconnector.dcp import S3StorageReader
    from s3torchconnector.dcp.s3_file_system import S3FileSystem
    region, cfg, client = s3t_client()
    rc = S3ReaderConstructor.dcp_optimized()
    r = S3StorageReader(region, url, s3client_config=cfg, reader_constructor=rc)
    r.fs = S3FileSystem(region, s3_client=client(), reader_constructor=rc)
    r.path = r.fs.init_path(url)
    dcp.load(target, storage_reader=r, no_dist=True)


def timed_child(argv):
    """Runs a command; (seconds, its peak RSS in bytes); raises with its stderr on a failure.
    The peak is the command's own VmHWM, read while it runs (every 10 ms; the mark only grows):
    wait4's ru_maxrss would carry this process's size, which the forked child had before its
    exec (Linux keeps the larger of the two)."""
    t0 = time.perf_counter()
    p = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    hwm = 0
    while p.poll() is None:
        hwm = max(hwm, _status_bytes(p.pid, "VmHWM") or 0)
        time.sleep(0.01)
    secs = time.perf_counter() - t0
    err = p.stderr.read().decode(errors="replace").strip()
    p.stderr.close()
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(argv[:2])} exited {p.returncode}: {err[-300:]}")
    return secs, hwm


def one_s3(method, size, d):
    """The S3 section's child: up (a save that ends on S3), down (the state back from S3)."""
    import libckpt
    ck = os.path.join(ROOT, os.environ.get("B", "build"), "bin", "ckptctl")
    url = os.environ["PEERS_S3_URL"] + "/" + method
    n = [0]

    def cycle(st, dd, target, peak=None, out=None):
        n[0] += 1
        u = f"{url}/{n[0]}"
        if method == "s3t":
            t0 = time.perf_counter()
            s3t_save(st.state, u)
            up, up_rss = time.perf_counter() - t0, None
            if peak:
                up_rss = st.bytes + peak.extra()
                peak.reset()
            t0 = time.perf_counter()
            s3t_load(target, u)
            down, down_rss = time.perf_counter() - t0, peak.extra() if peak else None
        elif method == "ckpt_push":
            src, dst = os.path.join(dd, "src"), os.path.join(dd, "dst")
            with libckpt.Store(src, create=True) as s:  # the local save a push follows
                s.save(st.state, 1)
            up, up_rss = timed_child([ck, "push", src, "--remote", u, "--no-progress"])
            down, down_rss = timed_child([ck, "pull", dst, "--remote", u, "--no-progress"])
            with libckpt.Store(dst, read_only=True) as s:
                s.restore(target, 1)
        elif method == "ckpt_remote":
            src, dst = os.path.join(dd, "tier"), os.path.join(dd, "bound")
            if peak:
                peak.reset()
            t0 = time.perf_counter()
            with libckpt.Store(src, create=True, remote=u) as s:
                s.save(st.state, 1)
                s.wait_uploaded(1)
                up = time.perf_counter() - t0
            up_rss = st.bytes + peak.extra() if peak else None
            if peak:
                peak.reset()
            t0 = time.perf_counter()
            with libckpt.Store(dst, remote=u, remote_upload=False) as s:  # the node-loss path
                s.restore(target, 1)
            down, down_rss = time.perf_counter() - t0, peak.extra() if peak else None
        else:
            raise ValueError(method)
        st.check(target, f"{method}: the state back from S3")
        if out is not None:
            out.update(up_seconds=up, up_gbps=st.bytes / up / 1e9, down_seconds=down,
                       down_gbps=st.bytes / down / 1e9, peak_bytes=up_rss, down_peak_bytes=down_rss)

    warm_up(lambda st, dd: cycle(st, dd, st.zeros()))
    st = Plain(size)
    tgt = st.zeros()  # the model the state comes back into
    out = {}
    cycle(st, d, tgt, Peak(), out)
    out["peak_x"] = out["peak_bytes"] / st.bytes
    out["down_peak_x"] = out["down_peak_bytes"] / st.bytes
    return {"figures": out, "state_bytes": st.bytes}


def one_main(argv):
    """`peers_bench.py --one SECTION METHOD SIZE DIR OUT`: one method in this fresh process."""
    from torch_vs_ckpt import parse_size
    section, method, size, d, outp = argv[2], argv[3], parse_size(argv[4]), argv[5], argv[6]
    import warnings
    warnings.filterwarnings("ignore")
    os.makedirs(d, exist_ok=True)
    os.environ["PEERS_DIR"] = os.path.dirname(os.path.abspath(d))
    got = (one_file if section == "file" else one_s3)(method, size, d)
    with open(outp, "w") as f:
        json.dump(got, f)


# ----------------------------------------------------------------------------- DCP's ranks
def peer_rank_class():
    import dcp_bench as DB
    for m, (label, *_) in DCP.items():  # the savers dcp_bench's run_method looks up
        DB.METHODS.setdefault(m, (label, "async", False))

    class PeerRank(DB.Rank):
        """dcp_bench's rank (its state, 5%-change, timing) with DCP's DefaultStager savers and
        the memory figure."""

        def prepare(self, method, d, ctx):
            if method in ("fs_stager", "fs_process"):
                ctx["stager"] = make_stager()
                ctx["close"] = ctx["stager"].close

        def saved(self, method, out, ctx):
            if getattr(self, "peak", None) is not None:
                out["peak_extra"] = self.peak.extra()
            if "pool_bytes" in ctx:
                out["pool_bytes"] = ctx["pool_bytes"]

        def save(self, method, d, step, ctx):
            if method not in ("fs_stager", "fs_process"):
                return super().save(method, d, step, ctx)
            import torch.distributed.checkpoint as dcp
            from torch.distributed.checkpoint import FileSystemWriter
            from torch.distributed.checkpoint.state_dict_saver import AsyncCheckpointerType
            from torch_vs_ckpt import fsync_dir
            cid = os.path.join(d, f"step-{step}")
            kind = AsyncCheckpointerType.PROCESS if method == "fs_process" else \
                AsyncCheckpointerType.THREAD
            t0 = time.perf_counter()
            resp = dcp.async_save(self.state, storage_writer=FileSystemWriter(cid),
                                  checkpoint_id=cid, process_group=self.g_async,
                                  async_checkpointer_type=kind, async_stager=ctx["stager"])
            blocked, _ = async_wait(resp, t0)
            if self.rank == 0:
                fsync_dir(cid)
                fsync_dir(d)
            return blocked, time.perf_counter() - t0
    return PeerRank


def rank_main(argv):
    """`peers_bench.py --rank R N INIT SIZE RUN DIR OUT` (dcp_bench's run_world): the method of
    $PEERS_METHOD, once, in this fresh world."""
    import torch.distributed as dist
    from torch_vs_ckpt import parse_size
    rank, world, init, size, run, bdir, outp = (int(argv[2]), int(argv[3]), argv[4],
                                                parse_size(argv[5]), int(argv[6]), argv[7], argv[8])
    method = os.environ["PEERS_METHOD"]
    dist.init_process_group("gloo", init_method="file://" + init, rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=600))
    try:
        import warnings
        warnings.filterwarnings("ignore")
        PeerRank = peer_rank_class()
        r = PeerRank(rank, world, size, bdir)
        if os.environ.get("BENCH_PEERS_WARMUP", "1") != "0":
            w = PeerRank(rank, world, 2 * MiB, bdir, like=r)
            w.run_method(method, 0, tag="warmup")
            del w
        r.barrier()
        r.peak = Peak()
        out = r.run_method(method, run, tag="peers")
        extra = out.pop("peak_extra")
        # the fullest rank: its local state plus what its save added
        worst = r.slowest([(r.local_bytes + extra) / r.local_bytes, r.local_bytes + extra])
        out["peak_x"], out["peak_bytes"] = worst
        if rank == 0:
            with open(outp, "w") as f:
                json.dump({"figures": out, "local_bytes": r.local_bytes,
                           "state_bytes": r.local_bytes * world}, f)
    finally:
        dist.destroy_process_group()


# ----------------------------------------------------------------------------- the driver
def last_error(text):
    lines = [x.strip() for x in (text or "").splitlines() if x.strip() and not x.startswith(
        ("[Gloo]", "W1", "I1", "warnings.warn"))]
    return lines[-1][:400] if lines else "no output"


def run_one(section, method, size_s, bdir, timeout, env=None):
    """One method in a fresh process: its figures, or raises RuntimeError(the error)."""
    d = os.path.join(bdir, f"peers-{section}-{method}")
    shutil.rmtree(d, ignore_errors=True)
    fd, outp = tempfile.mkstemp(prefix="peers-", suffix=".json")
    os.close(fd)
    try:
        p = subprocess.run([sys.executable, os.path.abspath(__file__), "--one", section, method,
                            size_s, d, outp], env=dict(os.environ, **(env or {})),
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           timeout=timeout)
        if p.returncode == MISMATCH:
            sys.stderr.write(p.stdout[-3000:])
            sys.exit(f"peers_bench: {section} {method}: {last_error(p.stdout)}")
        if p.returncode != 0:
            sys.stderr.write(p.stdout[-3000:])
            raise RuntimeError(f"exited {p.returncode}: {last_error(p.stdout)}")
        with open(outp) as f:
            return json.load(f)
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"timed out after {timeout:.0f} s")
    finally:
        os.unlink(outp)
        shutil.rmtree(d, ignore_errors=True)


def run_dcp(method, n, size_s, run, bdir, timeout):
    import dcp_bench as DB
    from torch_vs_ckpt import parse_size
    try:
        return DB.run_world(n, parse_size(size_s), run, bdir, timeout, script=__file__,
                            env={"PEERS_METHOD": method, "MASTER_ADDR": "127.0.0.1"})
    except SystemExit as e:  # run_world exits naming the rank and its output
        raise RuntimeError(last_error(str(e)))
    finally:
        for tag in ("peers", "warmup"):
            shutil.rmtree(os.path.join(bdir, f"{tag}-{method}-{n}"), ignore_errors=True)


def missing_peer(method):
    import importlib.util
    mod = NEEDS.get(method)
    if mod and importlib.util.find_spec(mod) is None:
        return (f"ModuleNotFoundError: No module named '{mod}' in {sys.executable} "
                f"(make bench-peers installs it: tools/peers-venv.sh)")
    return None


def series(prefix, suffix, methods, runs, call, res, keys_of):
    """Runs every method `runs` times, interleaved (the order rotates each run); medians into
    res as PREFIX_METHOD_KEY_SUFFIX, and PREFIX_METHOD_status_SUFFIX ("ok" or "not run: ...")."""
    samples = {m: {} for m in methods}
    err = {m: missing_peer(m) for m in methods}
    state_bytes = None
    for run in range(runs):
        order = methods[run % len(methods):] + methods[:run % len(methods)]
        for m in order:
            if err[m]:
                continue
            try:
                got = call(m, run)
            except RuntimeError as e:
                err[m] = str(e)
                print(f"  {prefix} {m}{suffix}: not run: {e}", flush=True)
                continue
            state_bytes = got["state_bytes"]
            for k, v in got["figures"].items():
                if isinstance(v, (int, float)):
                    samples[m].setdefault(k, []).append(v)
            print(f"  {prefix} {m}{suffix} run {run + 1}/{runs}: " + ", ".join(
                f"{k} {v:.3f}" for k, v in got["figures"].items()
                if k.endswith(("_seconds", "_x")) and isinstance(v, float)), flush=True)
    for m in methods:
        res[f"{prefix}_{m}_status{suffix}"] = f"not run: {err[m]}" if err[m] else "ok"
        if err[m]:
            continue
        for k in keys_of(m):
            if k in samples[m]:
                res[f"{prefix}_{m}_{k}{suffix}"] = statistics.median(samples[m][k])
        res[f"{prefix}_{m}_samples{suffix}"] = samples[m]
    return state_bytes


class Rgw:
    """A fresh radosgw on loopback (tests/s3/rgw.sh start / stop) and its bucket."""

    def __init__(self, mem_mb, bdir):
        self.dir = tempfile.mkdtemp(prefix="peers-rgw-", dir=bdir)
        os.rmdir(self.dir)  # rgw.sh wants to make it (an empty or missing directory)
        env = dict(os.environ, RGW_MEMSTORE_MB=str(mem_mb))
        p = subprocess.run(["bash", os.path.join(ROOT, "tests/s3/rgw.sh"), "start", self.dir],
                           env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        if p.returncode != 0:
            raise RuntimeError(f"radosgw did not start: {last_error(p.stdout + p.stderr)}")
        self.env = dict(kv.split("=", 1) for kv in p.stdout.split()[1:] if "=" in kv)
        s3ops = os.path.join(ROOT, os.environ.get("B", "build"), "tests", "bin", "s3ops")
        mk = ([s3ops, "s3://bench", "mkbucket"] if os.access(s3ops, os.X_OK) else
              ["aws", "--endpoint-url", self.env["AWS_ENDPOINT_URL"], "s3", "mb", "s3://bench"])
        q = subprocess.run(mk, env=dict(os.environ, **self.env), capture_output=True, text=True)
        if q.returncode != 0:
            self.stop()
            raise RuntimeError(f"no bucket: {' '.join(mk[:2])}: {last_error(q.stderr)}")

    def stop(self):
        subprocess.run(["bash", os.path.join(ROOT, "tests/s3/rgw.sh"), "stop", self.dir],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def s3_section(size_s, runs, bdir, timeout, methods, res):
    from torch_vs_ckpt import parse_size
    mib = parse_size(size_s) >> 20
    ck = os.path.join(ROOT, os.environ.get("B", "build"), "bin", "ckptctl")
    why = None
    if not os.access(ck, os.X_OK):
        why = f"{ck} is not built (make all)"
    elif shutil.which("radosgw") is None:
        why = "no radosgw (tools/deps.d/s3.test: sh tools/install-deps.sh test)"
    if why:
        for m in methods:
            res[f"peers_s3_{m}_status"] = f"not run: {why}"
        print(f"peers_bench: S3 section not run: {why}")
        return None
    rgw = {}

    def call(m, run):
        if run not in rgw:  # one fresh radosgw a run (its memstore keeps what was deleted)
            for old in list(rgw.values()):
                old.stop()
            rgw.clear()
            rgw[run] = Rgw(len(methods) * 2 * mib + 1024, bdir)
        env = dict(rgw[run].env, PEERS_S3_URL=f"s3://bench/run{run}")
        return run_one("s3", m, size_s, bdir, timeout, env)
    try:
        return series("peers_s3", "", methods, runs, call, res, lambda m: S3_KEYS)
    finally:
        for r in rgw.values():
            r.stop()


# ----------------------------------------------------------------------------- goals
def goals(res, sizes, worlds, cuda):
    """[(line, record)] of every goal, from this run's figures."""
    out = []

    def ok(prefix, m, suffix):
        return res.get(f"{prefix}_{m}_status{suffix}") == "ok"

    def add(name, inst, value, ref, ref_what, ratio, target, test, unit="s"):
        if value is None or ref is None:
            rec = {"goal": name, "at": inst, "result": "NOT RUN", "target": target,
                   "why": ref_what if value is not None else "libckpt's figure is missing"}
            out.append((f"NOT RUN  {name} ({inst}): {rec['why']}; target {target}", rec))
            return
        r = "PASS" if test(ratio) else "MISS"
        rec = {"goal": name, "at": inst, "value": value, "reference": ref, "ref_what": ref_what,
               "ratio": ratio, "target": target, "result": r, "unit": unit}
        out.append((f"{r:<8} {name} ({inst}): {value:.3f} {unit} against {ref:.3f} {unit} "
                    f"({ref_what}): {ratio:.2f}, target {target}", rec))
        res[f"peers_goal_{name.replace(' ', '_')}_{inst}_ratio"] = ratio

    def best(prefix, methods, key, suffix):
        c = [(res[f"{prefix}_{m}_{key}{suffix}"], m) for m in methods
             if ok(prefix, m, suffix) and f"{prefix}_{m}_{key}{suffix}" in res]
        return min(c) if c else (None, "no peer ran: " + "; ".join(
            f"{m}: {res.get(f'{prefix}_{m}_status{suffix}', 'not run')}" for m in methods))

    fm = file_methods(cuda)
    for s in sizes:
        sfx = f"_{s}"
        peers = [m for m in fm if fm[m][3] and not fm[m][1]]
        v = res.get(f"peers_file_ckpt_save_durable_seconds{sfx}")
        b, who = best("peers_file", peers, "durable_seconds", sfx)
        add("durable save", s, v, b, who, v / b if v and b else None, "<= 0.90 x best peer",
            lambda r: r <= 0.9)
        v = res.get(f"peers_file_ckpt_save_load_seconds{sfx}")
        b, who = best("peers_file", [m for m in peers if fm[m][2]], "load_seconds", sfx)
        # a speed ratio: the best peer's seconds over libckpt's
        add("restore", s, v, b, who, b / v if v and b else None, ">= 1.00 x best peer's load",
            lambda r: r >= 1.0)
        peak_goal(add, res, "peers_file", [m for m in fm if fm[m][3]], sfx, s, best)
        if cuda:
            v = res.get(f"peers_file_ckpt_async_blocked_seconds{sfx}")
            b, who = best("peers_file", ["fs_async", "fs_stager"], "blocked_seconds", sfx)
            add("blocked", s, v, b, who, v / b if v and b else None,
                "<= 0.50 x DCP's best stager", lambda r: r <= 0.5)
    for n in worlds:
        sfx = f"_{n}"
        dpeers = [m for m in DCP if DCP[m][3]]
        for who_m, name in (("ckpt_async", "blocked"), ("ckptdcp_async", "blocked libckpt.dcp")):
            v = res.get(f"peers_dcp_{who_m}_blocked_seconds{sfx}")
            b, who = best("peers_dcp", dpeers, "blocked_seconds", sfx)
            add(name, f"N={n}", v, b, who, v / b if v and b else None,
                "<= 0.50 x DCP's best stager", lambda r: r <= 0.5)
        peak_goal(add, res, "peers_dcp", dpeers, sfx, f"N={n}", best)
    for key, name in (("up_seconds", "push"), ("down_seconds", "pull")):
        v = res.get(f"peers_s3_ckpt_push_{key}")
        b = res.get(f"peers_s3_s3t_{key}") if ok("peers_s3", "s3t", "") else None
        add(name, "S3", v, b, "s3torchconnector" if b else
            f"s3t: {res.get('peers_s3_s3t_status', 'not run')}", b / v if v and b else None,
            ">= 1.00 x s3torchconnector", lambda r: r >= 1.0)
    return out


def peak_goal(add, res, prefix, peers, sfx, inst, best):
    """An async save's peak: <= 1.1 x (state + pool), and below every peer's."""
    # per process: a rank's peak against its local state and its own pool
    p = res.get(f"{prefix}_ckpt_async_peak_bytes{sfx}")
    pool = res.get(f"{prefix}_ckpt_async_pool_bytes{sfx}")
    state = res.get(f"{prefix}_local_bytes{sfx}", res.get(f"{prefix}_state_bytes{sfx}"))
    if p is None or pool is None or not state:
        add("async peak memory", inst, None, None, "libckpt's async save did not run", None,
            "<= 1.10 x (state + pool), below every peer", None)
        return
    b, who = best(prefix, peers, "peak_bytes", sfx)
    if b is None:  # half a goal is no goal: not run, saying why
        add("async peak memory", inst, p / state, None, who, None,
            "<= 1.10 x (state + pool), below every peer", None)
        return
    ratio = p / (state + pool)
    below = b is not None and p < b
    add("async peak memory", inst, p / state, (state + pool) / state,
        f"state + pool; best peer {who} at {b / state:.2f} x state" if b else
        f"state + pool; {who}", ratio, "<= 1.10 x (state + pool), below every peer",
        lambda r: r <= 1.1 and below, unit="x state")


# ----------------------------------------------------------------------------- tables
def table(res, title, prefix, methods, sfx, cols):
    def f(k):
        v = res.get(k)
        return "%9.3f" % v if isinstance(v, (int, float)) else "%9s" % "-"
    lines = [title, "%-44s" % "" + "".join("%10s" % c for c, _ in cols)]
    for m, spec in methods.items():
        st = res.get(f"{prefix}_{m}_status{sfx}", "not run")
        if st != "ok":
            lines.append("%-44s %s" % (spec[0], st[:160]))
            continue
        lines.append("%-44s" % spec[0] + "".join(" " + f(f"{prefix}_{m}_{k}{sfx}")
                                                 for _, k in cols))
    return "\n".join(lines)


FILE_COLS = [("durable s", "durable_seconds"), ("GB/s", "durable_gbps"),
             ("blocked s", "blocked_seconds"), ("load s", "load_seconds"),
             ("load GB/s", "load_gbps"), ("peak x", "peak_x"), ("load pk x", "load_peak_x")]
DCP_COLS = [("blocked s", "blocked_seconds"), ("durable s", "durable_seconds"),
            ("5% blk s", "incr5_blocked_seconds"), ("5% dur s", "incr5_durable_seconds"),
            ("peak x", "peak_x")]
S3_COLS = [("up s", "up_seconds"), ("up GB/s", "up_gbps"), ("down s", "down_seconds"),
           ("dn GB/s", "down_gbps"), ("peak x", "peak_x"), ("dn pk x", "down_peak_x")]


def keep_other_sections(path, res, sections):
    """res with the figures of the sections not run now taken from the results file."""
    try:
        with open(path) as f:
            old = json.load(f)
    except (OSError, ValueError):
        return res
    out = dict(res)
    for k, v in old.items():
        sec = k.split("_")[1] if k.startswith("peers_") else None
        if sec in ("file", "dcp", "s3") and sec not in sections:
            out[k] = v
    for k, sec in (("peers_sizes", "file"), ("peers_worlds", "dcp")):
        if sec not in sections and k in old:
            out[k] = old[k]
    out["peers_sections_kept"] = [s for s in ("file", "dcp", "s3") if s not in sections]
    return out


def merge(path, res):
    old = {}
    if os.path.exists(path):
        try:
            with open(path) as f:
                old = json.load(f)
        except (OSError, ValueError):
            old = {}
    old = {k: v for k, v in old.items() if not k.startswith("peers_")}  # this run's replace them
    old.update(res)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path + ".tmp", "w") as f:
        json.dump(old, f, indent=1, sort_keys=True)
    os.replace(path + ".tmp", path)


def main():
    from torch_vs_ckpt import parse_size
    env = os.environ.get
    sizes = env("BENCH_PEERS_SIZES", "1G 4G").split()
    runs = int(env("BENCH_RUNS", "3"))
    worlds = [int(x) for x in env("BENCH_PEERS_WORLDS", "1 2 4").split()]
    dcp_size = env("BENCH_PEERS_DCP_SIZE", sizes[0])
    s3_size = env("BENCH_PEERS_S3_SIZE", "2G")
    sections = env("BENCH_PEERS_SECTIONS", "file dcp s3").split()
    only = env("BENCH_PEERS_METHODS", "").split()
    cuda = env("BENCH_PEERS_CUDA", "0") == "1"
    timeout = float(env("BENCH_PEERS_TIMEOUT", "1800"))
    b = env("B", "build")
    bdir = os.path.abspath(env("BENCH_DIR", os.path.join(ROOT, b, "bench", "work")))
    results_path = env("BENCH_PEERS_OUT") or os.path.join(ROOT, b, "bench", "results.json")
    os.makedirs(bdir, exist_ok=True)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit("peers_bench: terminated"))
    import torch
    import libckpt

    def pick(ms):
        return [m for m in ms if not only or m in only]
    load0 = list(os.getloadavg())
    print(f"peers_bench: sections {sections}, sizes {sizes}, DCP {dcp_size} at N={worlds}, S3 "
          f"{s3_size}, {runs} runs, directory {bdir}; {sys.executable}; torch {torch.__version__}"
          f", libckpt {libckpt.library_version()}; {os.cpu_count()} CPUs, load average "
          f"{load0[0]:.2f}", flush=True)
    res = {"peers_sizes": sizes, "peers_worlds": worlds, "peers_runs": runs,
           "peers_cuda": cuda, "peers_python": sys.executable, "peers_torch": torch.__version__,
           "peers_dir": bdir}
    for mod in ("deepspeed", "s3torchconnector"):
        try:
            res[f"peers_{mod}_version"] = __import__("importlib.metadata").metadata.version(mod)
        except Exception:
            res[f"peers_{mod}_version"] = None
    opts, why = stager_options()
    res["peers_dcp_stager_options"], res["peers_dcp_stager_off"] = opts, why
    res["peers_fastpersist_settings"] = ds_settings()
    fm = file_methods(cuda)
    dev = {"PEERS_DEVICE": "cuda" if cuda else "cpu"}
    def run_file():
        for s in sizes:
            print(f"peers_bench: file section, {s}", flush=True)
            sb = series("peers_file", f"_{s}", pick(list(fm)), runs,
                        lambda m, run: run_one("file", m, s, bdir, timeout, dev), res,
                        lambda m: method_keys("file", m, cuda))
            res[f"peers_file_state_bytes_{s}"] = sb or parse_size(s)

    def run_dcp_section():
        for n in worlds:
            print(f"peers_bench: DCP section, N={n}, {dcp_size}", flush=True)
            sb = series("peers_dcp", f"_{n}", pick(list(DCP)), runs,
                        lambda m, run: run_dcp(m, n, dcp_size, run, bdir, timeout), res,
                        lambda m: method_keys("dcp", m))
            res[f"peers_dcp_state_bytes_{n}"] = sb or parse_size(dcp_size)
            res[f"peers_dcp_local_bytes_{n}"] = res[f"peers_dcp_state_bytes_{n}"] // n

    def run_s3():
        print(f"peers_bench: S3 section, {s3_size}", flush=True)
        sb = s3_section(s3_size, runs, bdir, timeout, pick(list(S3)), res)
        res["peers_s3_state_bytes"] = sb or parse_size(s3_size)
    for sec in sections:  # in the order asked
        {"file": run_file, "dcp": run_dcp_section, "s3": run_s3}[sec]()
    not_asked = "not run: the section was not asked for (BENCH_PEERS_SECTIONS)"
    for sec, ms, sfxs in (("file", fm, [f"_{x}" for x in sizes]),
                          ("dcp", DCP, [f"_{x}" for x in worlds]), ("s3", S3, [""])):
        if sec not in sections:
            for m in pick(list(ms)):
                for x in sfxs:
                    res[f"peers_{sec}_{m}_status{x}"] = not_asked
    if env("BENCH_PEERS_KEEP") == "1":
        # a section run again: the other sections' figures of the results file are kept, and
        # the goals are drawn from them all (each line says which run's figures it compares)
        res = keep_other_sections(results_path, res, sections)
        sizes, worlds = res["peers_sizes"], res["peers_worlds"]
        sections = ["file", "dcp", "s3"]
    gl = goals(res, sizes if "file" in sections else [], worlds if "dcp" in sections else [], cuda)
    res["peers_goals"] = [rec for _, rec in gl]
    res["peers_load_avg_start"], res["peers_load_avg_end"] = load0, list(os.getloadavg())
    res["peers_bench_time"] = datetime.datetime.now(datetime.timezone.utc).strftime(
        "%Y-%m-%dT%H:%M:%SZ")
    merge(results_path, res)
    print()
    if "file" in sections:
        for s in sizes:
            print(table(res, f"one process, {s} state (median of {runs})", "peers_file",
                        {m: fm[m] for m in pick(list(fm))}, f"_{s}", FILE_COLS) + "\n")
    if "dcp" in sections:
        for n in worlds:
            print(table(res, f"DCP, N={n} gloo ranks, {dcp_size} state", "peers_dcp",
                        {m: DCP[m] for m in pick(list(DCP))}, f"_{n}", DCP_COLS) + "\n")
    print(table(res, f"S3 (radosgw on loopback), {s3_size} state", "peers_s3",
                {m: S3[m] for m in pick(list(S3))}, "", S3_COLS) + "\n")
    print(f"DefaultStager options {opts}" + (f", off: {why}" if why else ""))
    print(f"load average {load0[0]:.2f} at start, {res['peers_load_avg_end'][0]:.2f} at end "
          f"({os.cpu_count()} CPUs); {len(res)} peers_* keys merged into {results_path}\n")
    for line, _ in gl:
        print(line)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--rank":
        rank_main(sys.argv)
    elif len(sys.argv) > 1 and sys.argv[1] == "--one":
        one_main(sys.argv)
    else:
        main()
