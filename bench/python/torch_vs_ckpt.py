#!/usr/bin/python3
"""libckpt's Python binding against torch.save, on the same state dict and the same directory.

    /usr/bin/python3 bench/python/torch_vs_ckpt.py
    BENCH_SIZE=256M BENCH_RUNS=1 /usr/bin/python3 bench/python/torch_vs_ckpt.py   # quick

Environment: BENCH_SIZE (state size, default 2G), BENCH_DIR (default build/bench/work), BENCH_RUNS
(default 3; the median is reported), BENCH_STRICT=1 (exit 1 on a MISS), BENCH_CUDA=0 (skip the
CUDA part), B (build directory, default build: results go to $B/bench/results.json, merged).
See bench/python/README.md for what each figure means.
"""

import datetime
import json
import math
import os
import shutil
import statistics
import sys
import tempfile
import time

import torch

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "python"))
import libckpt  # noqa: E402

MiB = 1 << 20


def parse_size(s):
    s = s.strip().upper().rstrip("B").rstrip("I")
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}.get(s[-1:], 1)
    return int(float(s[:-1] if s[-1:] in "KMGT" else s) * mult)


def make_state(total, device="cpu", seed=0):
    """bf16 'weights' and fp32 'optimizer' tensors named like a transformer's, 1 to 64 MiB each
    (log-uniform), 2-D, random contents; about `total` bytes."""
    g = torch.Generator().manual_seed(seed)
    state, used, layer = {}, 0, 0
    while used < total:
        for part in ("self_attn.q_proj", "self_attn.o_proj", "mlp.up_proj", "mlp.down_proj"):
            for kind, dtype in (("weight", torch.bfloat16), ("exp_avg", torch.float32),
                                ("exp_avg_sq", torch.float32)):
                nb = int(math.exp(torch.empty(1).uniform_(math.log(MiB), math.log(64 * MiB),
                                                          generator=g).item()))
                nb = min(nb, max(total - used, 4096))
                esz = 2 if dtype == torch.bfloat16 else 4
                cols = 1024
                rows = max(1, nb // (esz * cols))
                t = torch.randn(rows, cols, generator=g).to(dtype)
                name = f"model.layers.{layer}.{part}.{kind}"
                state[name] = t.to(device) if device != "cpu" else t
                used += rows * cols * esz
                if used >= total:
                    return state, used
        layer += 1
    return state, used


def fsync_dir(d):
    fd = os.open(d, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def torch_save(state, path):
    t0 = time.perf_counter()
    with open(path, "wb") as f:
        torch.save(state, f)
        f.flush()
        os.fsync(f.fileno())
    fsync_dir(os.path.dirname(path))
    return time.perf_counter() - t0


def new_store(path, pool):
    shutil.rmtree(path, ignore_errors=True)
    s = libckpt.Store(path, create=True, pool_size=pool)
    s.reserve(pool)  # allocates and pins the pool outside the timing (ckpt_store_reserve)
    return s


def evict(path):
    """Drops a synced file's pages from the page cache, so that a load reads the disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def torch_load(path):
    evict(path)
    t0 = time.perf_counter()
    with open(path, "rb") as f:
        st = torch.load(f)
    dt = time.perf_counter() - t0
    del st
    return dt


def empty_pinned(nbytes):
    try:
        return torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
    except RuntimeError:  # no CUDA: plain memory, touched
        return torch.zeros(nbytes, dtype=torch.uint8)


def memcpy_time(state, buf):
    """torch copy_ of every tensor into one preallocated (pinned when possible) buffer."""
    off = 0
    views = []
    for t in state.values():
        nb = t.numel() * t.element_size()
        views.append((buf[off:off + nb].view(t.dtype).view(t.shape), t))
        off += nb
    for dst, src in views:  # touch
        dst.copy_(src)
    t0 = time.perf_counter()
    for dst, src in views:
        dst.copy_(src)
    return time.perf_counter() - t0


def cuda_part(size, bdir, runs, pool):
    """CUDA tensors: libckpt save_async vs torch.distributed.checkpoint.async_save vs torch.save."""
    out = {"ckpt_submit": [], "ckpt_snapshot": [], "ckpt_total": [], "torch_save": [],
           "dcp_blocking": [], "dcp_total": []}
    state, used = make_state(size, device="cuda", seed=1)
    torch.cuda.synchronize()
    try:
        import torch.distributed as dist
        import torch.distributed.checkpoint as dcp
        has_dcp = hasattr(dcp, "async_save")
        if has_dcp and dist.is_available() and not dist.is_initialized():
            fd, store_file = tempfile.mkstemp(prefix="dcp-pg-")
            os.close(fd)
            dist.init_process_group("gloo", init_method=f"file://{store_file}", rank=0, world_size=1)
    except Exception as e:  # noqa: BLE001
        print(f"cuda: torch.distributed.checkpoint.async_save unavailable ({e})")
        has_dcp = False
    for r in range(runs):
        p = os.path.join(bdir, "py-cuda-ckpt")
        s = new_store(p, pool)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        h = s.save_async(state, 1)
        t1 = time.perf_counter()
        h.wait_snapshot()
        t2 = time.perf_counter()
        h.wait()
        t3 = time.perf_counter()
        s.close()
        shutil.rmtree(p, ignore_errors=True)
        out["ckpt_submit"].append(t1 - t0)
        out["ckpt_snapshot"].append(t2 - t0)
        out["ckpt_total"].append(t3 - t0)

        f = os.path.join(bdir, "py-cuda-torch.pt")
        torch.cuda.synchronize()
        out["torch_save"].append(torch_save(state, f))
        os.unlink(f)

        if has_dcp:
            d = os.path.join(bdir, f"py-cuda-dcp-{r}")
            shutil.rmtree(d, ignore_errors=True)
            torch.cuda.synchronize()
            try:
                t0 = time.perf_counter()
                fut = dcp.async_save(state, checkpoint_id=d)
                t1 = time.perf_counter()
                if hasattr(fut, "upload_completion"):  # newer torch: AsyncSaveResponse
                    fut.staging_completion.result()
                    t1 = time.perf_counter()
                    fut.upload_completion.result()
                else:
                    fut.result()
                t2 = time.perf_counter()
                out["dcp_blocking"].append(t1 - t0)
                out["dcp_total"].append(t2 - t0)
            except Exception as e:  # noqa: BLE001
                print(f"cuda: dcp.async_save failed ({type(e).__name__}: {e}); skipping it")
                has_dcp = False
            shutil.rmtree(d, ignore_errors=True)
        print(f"cuda run {r + 1}/{runs}: " + ", ".join(f"{k} {v[-1]:.3f}s" for k, v in out.items() if v),
              flush=True)
    return {k: v for k, v in out.items() if v}, used


def main():
    size = parse_size(os.environ.get("BENCH_SIZE", "2G"))
    runs = int(os.environ.get("BENCH_RUNS", "3"))
    b = os.environ.get("B", "build")
    bdir = os.path.abspath(os.environ.get("BENCH_DIR", os.path.join(ROOT, b, "bench", "work")))
    results_path = os.path.join(ROOT, b, "bench", "results.json")
    os.makedirs(bdir, exist_ok=True)
    torch.manual_seed(0)

    state, used = make_state(size)
    pool = used + 16 * MiB  # the whole state plus two I/O buffers: the disk never throttles the snapshot
    print(f"state: {len(state)} tensors, {used / 2**30:.2f} GiB (bf16 weights, fp32 optimizer); "
          f"directory {bdir}; {runs} runs; libckpt {libckpt.library_version()} from "
          f"{libckpt.library_path()}", flush=True)
    buf = empty_pinned(used)

    samples = {k: [] for k in ("torch_save_seconds", "ckpt_save_seconds", "ckpt_blocking_seconds",
                               "ckpt_async_total_seconds", "ckpt_incr5_seconds", "memcpy_seconds_py",
                               "torch_load_seconds", "ckpt_load_seconds")}
    names = list(state)
    rng = torch.Generator().manual_seed(5)
    n_changed = max(1, round(0.05 * len(names)))
    last_stats = {}
    for r in range(runs):
        samples["memcpy_seconds_py"].append(memcpy_time(state, buf))

        f = os.path.join(bdir, "py-torch-save.pt")
        samples["torch_save_seconds"].append(torch_save(state, f))
        samples["torch_load_seconds"].append(torch_load(f))
        os.unlink(f)

        # synchronous libckpt save into a fresh store
        p = os.path.join(bdir, "py-ckpt-sync")
        s = new_store(p, pool)
        t0 = time.perf_counter()
        st = s.save(state, 1)
        samples["ckpt_save_seconds"].append(time.perf_counter() - t0)
        last_stats["sync"] = st.as_dict()
        # load: new tensors, as torch.load makes (libckpt reads with O_DIRECT: no page cache)
        t0 = time.perf_counter()
        loaded = s.load(1)
        samples["ckpt_load_seconds"].append(time.perf_counter() - t0)
        if not all(torch.equal(loaded[k].view(torch.uint8), state[k].view(torch.uint8))
                   for k in names[:4]):
            sys.exit("torch_vs_ckpt: the loaded state differs from the saved one")
        del loaded
        s.close()
        shutil.rmtree(p, ignore_errors=True)

        # asynchronous save into a fresh store: the caller is blocked until wait_snapshot returns
        p = os.path.join(bdir, "py-ckpt-async")
        s = new_store(p, pool)
        t0 = time.perf_counter()
        h = s.save_async(state, 1)
        h.wait_snapshot()
        t1 = time.perf_counter()
        st = h.wait()
        t2 = time.perf_counter()
        samples["ckpt_blocking_seconds"].append(t1 - t0)
        samples["ckpt_async_total_seconds"].append(t2 - t0)
        last_stats["async"] = st.as_dict()

        # the next save with 5% of the tensors changed (every byte of those tensors)
        pick = torch.randperm(len(names), generator=rng)[:n_changed].tolist()
        for i in pick:
            state[names[i]].add_(1)
        t0 = time.perf_counter()
        st = s.save(state, 2)
        samples["ckpt_incr5_seconds"].append(time.perf_counter() - t0)
        last_stats["incr5"] = st.as_dict()
        s.close()
        shutil.rmtree(p, ignore_errors=True)
        print(f"run {r + 1}/{runs}: " + ", ".join(f"{k.replace('_seconds', '')} {v[-1]:.3f}s"
                                                  for k, v in samples.items()), flush=True)

    med = {k: statistics.median(v) for k, v in samples.items()}
    res = dict(med)
    res.update({
        "py_bench_time": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "py_bench_dir": bdir, "py_state_bytes": used, "py_tensors": len(state), "py_runs": runs,
        "py_incr5_changed_tensors": n_changed,
        "py_incr5_bytes_stored": last_stats["incr5"]["bytes_stored"],
        "py_ckpt_vs_torch": med["ckpt_save_seconds"] / med["torch_save_seconds"],
        "py_blocking_vs_memcpy": med["ckpt_blocking_seconds"] / med["memcpy_seconds_py"],
        "py_load_vs_torch": med["ckpt_load_seconds"] / med["torch_load_seconds"],
        "py_engine": last_stats["sync"]["engine"], "py_direct_io": last_stats["sync"]["direct_io"],
        "py_threads": last_stats["sync"]["threads"], "py_pool_bytes": last_stats["sync"]["pool_bytes"],
        "py_lib_snapshot_seconds": last_stats["async"]["snapshot_seconds"],
        "py_bench_samples": samples,
        "py_load_avg": list(os.getloadavg()),
    })
    del buf

    if torch.cuda.is_available() and os.environ.get("BENCH_CUDA", "1") != "0":
        del state
        cs, cused = cuda_part(size, bdir, runs, pool)
        cmed = {k: statistics.median(v) for k, v in cs.items()}
        res.update({f"cuda_{k}_seconds": v for k, v in cmed.items()})
        res["cuda_state_bytes"] = cused
        res["cuda_bench_samples"] = cs

    # merge into results.json (other benchmarks write the other keys)
    os.makedirs(os.path.dirname(results_path), exist_ok=True)
    try:
        with open(results_path) as f:
            allres = json.load(f)
    except (OSError, ValueError):
        allres = {}
    allres.update(res)
    tmp = results_path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(allres, f, indent=2, sort_keys=True)
        f.write("\n")
    os.replace(tmp, results_path)

    gib = used / 2**30
    print(f"\n{'figure':<28}{'seconds':>10}{'GiB/s':>9}   target")
    rows = [("memcpy_seconds_py", "reference"), ("torch_save_seconds", "reference"),
            ("ckpt_save_seconds", "<= 0.2 x torch_save"),
            ("ckpt_blocking_seconds", "<= 1.2 x memcpy_py"),
            ("ckpt_async_total_seconds", ""), ("ckpt_incr5_seconds", ""),
            ("torch_load_seconds", "reference"), ("ckpt_load_seconds", "<= 1.0 x torch_load")]
    for k, target in rows:
        print(f"{k:<28}{med[k]:>10.3f}{gib / med[k]:>9.2f}   {target}")
    checks = [("ckpt_save / torch_save", res["py_ckpt_vs_torch"], 0.2),
              ("ckpt_blocking / memcpy_py", res["py_blocking_vs_memcpy"], 1.2),
              ("ckpt_load / torch_load", res["py_load_vs_torch"], 1.0)]
    miss = False
    for what, v, lim in checks:
        ok = v <= lim
        miss |= not ok
        print(f"{what:<28}{v:>10.3f}   <= {lim}  {'PASS' if ok else 'MISS'}")
    for k in sorted(res):
        if k.startswith("cuda_") and k.endswith("_seconds"):
            print(f"{k:<40}{res[k]:>10.3f}")
    print(f"results merged into {results_path}")
    if miss and os.environ.get("BENCH_STRICT") == "1":
        sys.exit(1)


if __name__ == "__main__":
    main()
