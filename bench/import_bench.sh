#!/bin/sh
# Issue-2 measurement: `ckptctl import` of a 1 GiB safetensors model, then a re-import after 5% of
# the file's bytes changed. Merges import1g_seconds, import1g_new_bytes, reimport5_seconds and
# reimport5_new_bytes (medians) into $B/bench/results.json and prints them.
#
# The file: deterministic random bf16 and fp32 tensors of 1 to 64 MiB (python3's random, seed
# fixed), "__metadata__" {"format": "pt"}. The change: 5% of the 1 MiB chunks, counted on each
# tensor's own 1 MiB grid (the grid ckptctl chunks a new store on), chosen at random over all
# tensors, each rewritten whole with new random bytes; so 5% of the data bytes change and about 5%
# of the chunks are new. Each run imports step 1 into a fresh store, changes the file, imports
# step 2, puts the original bytes back, and deletes the store.
#
# Seconds are the wall time of the whole `ckptctl import` command (validation and reading of the
# file included); the library's own figure is kept as import1g_lib_seconds / reimport5_lib_seconds.
# The source file sits in the page cache (it was just written, then synced); BENCH_DROP_CACHES=1
# drops the caches before each import (root only) to measure a cold source.
#
# After each step-1 import: export_seconds (`ckptctl export STORE 1`), cp_sync_seconds
# (cp of the source from the page cache + sync), cp_sync_cold_seconds (the same after the source's
# pages were dropped, so that cp reads it from the device as export reads its packs; the pages
# are read back afterwards) and, when fio exists, export_fio_bound_seconds (fio reading the packs
# and writing a file of their size at once, both O_DIRECT: what the device allows an export).
#
# Environment: B (default build), BENCH_DIR (default $B/bench/work), BENCH_RUNS (default 3),
# BENCH_IMPORT_SIZE (default 1G), BENCH_DROP_CACHES, BENCH_STRICT=1 (fail when ckptctl import is
# missing instead of skipping).
set -eu
B=${B:-build}
BENCH_DIR=${BENCH_DIR:-$B/bench/work}
BENCH_RUNS=${BENCH_RUNS:-3}
CKPTCTL=${CKPTCTL:-$B/bin/ckptctl}
mkdir -p "$BENCH_DIR" "$B/bench"

if ! [ -x "$CKPTCTL" ] || ! "$CKPTCTL" import --help >/dev/null 2>&1; then
	echo "import-bench: $CKPTCTL has no 'import' command yet (run 'make'); skipped" >&2
	[ "${BENCH_STRICT:-0}" = 1 ] && exit 1
	exit 0
fi
command -v python3 >/dev/null 2>&1 || { echo "import-bench: python3 is missing" >&2; exit 1; }

exec python3 - "$CKPTCTL" "$BENCH_DIR" "$B/bench/results.json" "$BENCH_RUNS" \
	"${BENCH_IMPORT_SIZE:-1G}" "${BENCH_DROP_CACHES:-0}" <<'EOF'
import glob, json, os, random, re, shutil, statistics, struct, subprocess, sys, time

ckptctl, bdir, results, runs, size_arg, drop = sys.argv[1:7]
runs, drop = int(runs), drop == "1"
MiB = 1 << 20
m = re.fullmatch(r"(\d+)([KMGT]?)(i?B)?", size_arg.strip(), re.I)
if not m:
    sys.exit("import-bench: bad BENCH_IMPORT_SIZE '%s'" % size_arg)
size = int(m.group(1)) * 1024 ** " KMGT".index((m.group(2) or " ").upper())
path = os.path.join(bdir, "import-bench.safetensors")
store = os.path.join(bdir, "import-bench-store")
FRACTION = 0.05

def log(*a):
    print("import-bench:", *a, file=sys.stderr, flush=True)

# ---- the model file --------------------------------------------------------------------------
def layout(total, seed=20261201):
    """Tensors (name, dtype, shape, nbytes) summing to total bytes."""
    r = random.Random(seed)
    kinds = ["self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight",
             "self_attn.o_proj.weight", "mlp.gate_proj.weight", "mlp.up_proj.weight",
             "mlp.down_proj.weight", "exp_avg", "exp_avg_sq", "master_weight"]
    out, left, i = [], total, 0
    while left > 0:
        k = i % len(kinds)
        dt, es = ("BF16", 2) if k < 7 else ("F32", 4)
        cols = 1024 << r.randrange(4)
        target = int(MiB * (1 << r.randrange(6)) * (1 + r.randrange(1000) / 1000))
        rows = max(1, target // (cols * es))
        nb = rows * cols * es
        if nb >= left:
            shape, nb = [left // es], left // es * es
            if nb == 0:
                break
        else:
            shape = [rows, cols]
        out.append(("model.layers.%d.%s" % (i // len(kinds), kinds[k]), dt, shape, nb))
        left -= nb
        i += 1
    return out

tensors = layout(size)
header, off = {"__metadata__": {"format": "pt", "producer": "libckpt import_bench"}}, 0
for name, dt, shape, nb in tensors:
    header[name] = {"dtype": dt, "shape": shape, "data_offsets": [off, off + nb]}
    off += nb
hj = json.dumps(header, separators=(",", ":")).encode()
hj += b" " * (-len(hj) % 8)
data_start = 8 + len(hj)
file_bytes = data_start + off

def generate():
    t0 = time.monotonic()
    r = random.Random(1)
    with open(path + ".tmp", "wb") as f:
        f.write(struct.pack("<Q", len(hj)) + hj)
        left = off
        while left:
            n = min(left, 64 * MiB)
            f.write(r.randbytes(n))
            left -= n
    os.replace(path + ".tmp", path)
    log("wrote %s: %d tensors, %d bytes in %.1f s" % (path, len(tensors), file_bytes, time.monotonic() - t0))

# ---- the 5% change ---------------------------------------------------------------------------
def regions():
    """(file offset, length) of every 1 MiB chunk on each tensor's own grid."""
    out, pos = [], data_start
    for _, _, _, nb in tensors:
        for c in range(0, nb, MiB):
            out.append((pos + c, min(MiB, nb - c)))
        pos += nb
    return out

ALL = regions()
n_change = max(1, round(len(ALL) * FRACTION))

def mutate(seed):
    """Rewrites 5% of the chunks with new random bytes; returns the originals to put back."""
    r = random.Random(seed)
    chosen = sorted(r.sample(range(len(ALL)), n_change))
    saved = []
    with open(path, "r+b") as f:
        for k in chosen:
            o, n = ALL[k]
            f.seek(o)
            old = f.read(n)
            new = r.randbytes(n)
            if new == old:  # practically impossible; keep the change real anyway
                new = bytes((b ^ 0xFF) for b in old)
            f.seek(o)
            f.write(new)
            saved.append((o, old))
    return saved, sum(len(b) for _, b in saved)

def revert(saved):
    with open(path, "r+b") as f:
        for o, old in saved:
            f.seek(o)
            f.write(old)

# ---- measurement -----------------------------------------------------------------------------
def drop_caches():
    if drop:
        os.sync()
        try:
            with open("/proc/sys/vm/drop_caches", "w") as f:
                f.write("3\n")
        except OSError as e:
            log("cannot drop caches: %s" % e)

def do_import(step):
    drop_caches()
    t0 = time.monotonic()
    p = subprocess.run([ckptctl, "import", store, "--step", str(step), path, "--json"],
                       capture_output=True, text=True)
    dt = time.monotonic() - t0
    if p.returncode != 0:
        sys.exit("import-bench: ckptctl import step %d failed (%d): %s" % (step, p.returncode, p.stderr.strip()))
    try:
        st = json.loads(p.stdout)
    except ValueError:
        st = {}
    return dt, st

def timed(argv, what):
    t0 = time.monotonic()
    p = subprocess.run(argv, capture_output=True, text=True)
    dt = time.monotonic() - t0
    if p.returncode != 0:
        sys.exit("import-bench: %s failed (%d): %s" % (what, p.returncode, p.stderr.strip()))
    return dt

def drop_source_cache():
    """Evicts the source file's pages from the page cache (it is clean: it was synced)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)

def warm_source():
    """Reads the source file back into the page cache, as the imports expect it."""
    with open(path, "rb") as f:
        while f.read(64 * MiB):
            pass

FIO = shutil.which("fio")

def fio_bound(out):
    """The device's time to read the store's pack files and write a new file of the source's size
    at the same time, both O_DIRECT (the export's I/O, without its work): its lower bound. The
    packs, not the source: they were written as recently as export finds them (a virtual disk's
    host may still cache them). invalidate=0: fio would drop the source from the page cache, which
    the re-import after it expects there."""
    packs = sorted(glob.glob(os.path.join(store, "packs", "*.pack")))
    size = sum(os.path.getsize(p) for p in packs) // (16 * MiB) * 16 * MiB
    common = ["--bs=16M", "--iodepth=8", "--ioengine=io_uring", "--direct=1", "--invalidate=0"]
    return timed([FIO, "--output-format=terse", "--name=r", "--filename=" + ":".join(packs),
                  "--rw=read", "--size=%d" % size] + common
                 + ["--name=w", "--filename=" + out, "--rw=write", "--size=%d" % size,
                    "--fallocate=native", "--end_fsync=1"] + common, "fio read + write")

def export_and_cp():
    # `ckptctl export` of the imported checkpoint against cp + sync of the same file
    # (both write a new file of the same size on the same directory and make it durable). cp
    # reads its source from the page cache (warm: the file was just written or read) or, for
    # cp_sync_cold, from the device after its pages were dropped, as export reads its packs.
    out = os.path.join(bdir, "export-bench.safetensors")
    cp = ["sh", "-c", 'cp "$1" "$2" && sync "$2"', "cp", path, out]
    try:
        te = timed([ckptctl, "export", store, "1", "-o", out, "-q"], "ckptctl export")
        os.remove(out)
        tc = timed(cp, "cp + sync")
        os.remove(out)
        drop_source_cache()
        tcc = timed(cp, "cp + sync (cold source)")
        os.remove(out)
        warm_source()
        tf = fio_bound(out) if FIO else float("nan")
    finally:
        if os.path.exists(out):
            os.remove(out)
    return te, tc, tcc, tf

def listed():
    p = subprocess.run([ckptctl, "list", store, "--json"], capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit("import-bench: ckptctl list failed (%d): %s" % (p.returncode, p.stderr.strip()))
    return {int(c["step"]): c for c in json.loads(p.stdout)}

gen_needed = True
if os.path.exists(path) and os.path.getsize(path) == file_bytes:
    with open(path, "rb") as f:
        gen_needed = f.read(data_start) != struct.pack("<Q", len(hj)) + hj
if gen_needed:
    generate()
    # Written back now, not during run 1's import and export (up to 10% of memory stays dirty:
    # all of a 2 GiB file here), whose figures it slowed; the file stays in the page cache.
    os.sync()
else:
    log("reusing %s" % path)

S = {k: [] for k in ("import1g_seconds", "import1g_lib_seconds", "import1g_new_bytes",
                     "reimport5_seconds", "reimport5_lib_seconds", "reimport5_new_bytes",
                     "export_seconds", "cp_sync_seconds", "cp_sync_cold_seconds",
                     "export_fio_bound_seconds")}
changed = 0
try:
    for run in range(runs):
        shutil.rmtree(store, ignore_errors=True)
        t1, st1 = do_import(1)
        te, tc, tcc, tf = export_and_cp()
        S["export_seconds"].append(te)
        S["cp_sync_seconds"].append(tc)
        S["cp_sync_cold_seconds"].append(tcc)
        S["export_fio_bound_seconds"].append(tf)
        saved, changed = mutate(1000 + run)
        try:
            t2, st2 = do_import(2)
        finally:
            revert(saved)
        ls = listed()
        S["import1g_seconds"].append(t1)
        S["import1g_lib_seconds"].append(st1.get("seconds", float("nan")))
        S["import1g_new_bytes"].append(ls[1]["new_bytes"])
        S["reimport5_seconds"].append(t2)
        S["reimport5_lib_seconds"].append(st2.get("seconds", float("nan")))
        S["reimport5_new_bytes"].append(ls[2]["new_bytes"])
        log("run %d/%d: import %.3f s, %d new bytes; re-import %.3f s, %d new bytes"
            % (run + 1, runs, t1, ls[1]["new_bytes"], t2, ls[2]["new_bytes"]))
        shutil.rmtree(store, ignore_errors=True)
finally:
    shutil.rmtree(store, ignore_errors=True)
    if os.environ.get("BENCH_KEEP_FILE") != "1" and os.path.exists(path):
        os.remove(path)

res = {k: statistics.median(v) for k, v in S.items()}
for k in ("import1g_new_bytes", "reimport5_new_bytes"):
    res[k] = int(res[k])
res["import_file_bytes"] = file_bytes
res["import_tensors"] = len(tensors)
res["reimport5_changed_bytes"] = changed
res["reimport5_changed_chunks"] = n_change
res["import_chunks"] = len(ALL)
res["import_change"] = ("5%% of the 1 MiB chunks (%d of %d, on each tensor's grid), each rewritten whole"
                        % (n_change, len(ALL)))
res["import_runs"] = runs
res["export_vs_cp_sync"] = round(res["export_seconds"] / res["cp_sync_seconds"], 4)
res["export_vs_cp_sync_cold"] = round(res["export_seconds"] / res["cp_sync_cold_seconds"], 4)
if FIO:
    res["export_vs_fio_bound"] = round(res["export_seconds"] / res["export_fio_bound_seconds"], 4)
else:
    del res["export_fio_bound_seconds"]
    log("fio is missing: no export_fio_bound_seconds")
res["import_source_cache"] = "dropped" if drop else "warm"
res["import_bench_samples"] = S

old = {}
if os.path.exists(results):
    try:
        with open(results) as f:
            old = json.load(f)
        if not isinstance(old, dict):
            old = {}
    except ValueError:
        old = {}
old.update(res)
with open(results + ".tmp", "w") as f:
    json.dump(old, f, indent=2, sort_keys=True)
    f.write("\n")
os.replace(results + ".tmp", results)

print()
print("ckptctl import: %.2f GiB safetensors, %d tensors, %d run(s) (medians), source %s"
      % (file_bytes / 2**30, len(tensors), runs, res["import_source_cache"]))
print("%-22s %10s %14s %10s" % ("", "seconds", "new bytes", "GB/s"))
print("%-22s %10.3f %14d %10.3f" % ("import (step 1)", res["import1g_seconds"], res["import1g_new_bytes"],
                                    off / res["import1g_seconds"] / 1e9))
print("%-22s %10.3f %14d %10s" % ("re-import 5% (step 2)", res["reimport5_seconds"], res["reimport5_new_bytes"], "-"))
print("re-import / import: %.3f s/s, %.3f of the bytes; changed %d bytes in %d chunks"
      % (res["reimport5_seconds"] / res["import1g_seconds"],
         res["reimport5_new_bytes"] / max(1, res["import1g_new_bytes"]), changed, n_change))
print("export %.3f s, cp + sync %.3f s of the same file: %.3f (target < 1.0): %s"
      % (res["export_seconds"], res["cp_sync_seconds"], res["export_vs_cp_sync"],
         "PASS" if res["export_vs_cp_sync"] < 1.0 else "MISS"))
print("  cp + sync with the source read from the device (cold) %.3f s: export / cold %.3f"
      % (res["cp_sync_cold_seconds"], res["export_vs_cp_sync_cold"]))
if FIO:
    print("  fio read of the packs + write at once (export's device bound) %.3f s: export / bound %.3f"
          % (res["export_fio_bound_seconds"], res["export_vs_fio_bound"]))
print("results: %s" % results)
EOF
