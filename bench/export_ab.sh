#!/bin/sh
# A/B timing of `ckptctl export` and `ckptctl import`: two ckptctl binaries (before and
# after a change) on the same safetensors file and store, interleaved with cp + sync of the file
# (cp_sync: the source in the page cache; cp_sync_cold: its pages dropped first, so that cp reads
# it from the device as export reads its packs), RUNS rounds (this disk swings +-40% between
# minutes: only interleaved medians compare). Prints every sample and the medians.
#
#   sh bench/export_ab.sh OLD_CKPTCTL NEW_CKPTCTL FILE.safetensors [RUNS]
#
# FILE: e.g. the 2 GiB file bench/import_bench.sh writes (BENCH_IMPORT_SIZE=2G BENCH_KEEP_FILE=1
# leaves it in build/bench/work/import-bench.safetensors). Work files go beside FILE.
set -eu
old=$1 new=$2 file=$3 runs=${4:-5}
dir=$(dirname "$file")
exec python3 - "$old" "$new" "$file" "$dir" "$runs" <<'PY'
import os, shutil, statistics, subprocess, sys, time
old, new, src, d, runs = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5])
out, store = os.path.join(d, "ab-out.safetensors"), os.path.join(d, "ab-store")

def timed(argv):
    t0 = time.monotonic()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)
    return time.monotonic() - t0

def rm(p):
    shutil.rmtree(p, ignore_errors=True) if os.path.isdir(p) else os.path.exists(p) and os.remove(p)

def drop_cache(p):
    fd = os.open(p, os.O_RDONLY)
    os.fsync(fd)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    os.close(fd)

def warm(p):
    with open(p, "rb") as f:
        while f.read(64 << 20):
            pass

S = {k: [] for k in ("export_old", "export_new", "cp_sync", "cp_sync_cold", "import_old",
                     "import_new")}
cp = ["sh", "-c", 'cp "$1" "$2" && sync "$2"', "cp", src, out]
warm(src)
rm(store)
subprocess.run([new, "import", "-q", store, "--step", "1", src], check=True)
try:
    for r in range(runs):
        # Alternate which binary goes first, a cp + sync between every two exports.
        order = [("old", old), ("new", new)] if r % 2 == 0 else [("new", new), ("old", old)]
        for tag, exe in order:
            S["export_" + tag].append(timed([exe, "export", "-q", store, "1", "-o", out]))
            rm(out)
            S["cp_sync"].append(timed(cp))
            rm(out)
            drop_cache(src)
            S["cp_sync_cold"].append(timed(cp))
            rm(out)
            warm(src)
        for tag, exe in order:
            s2 = store + "-" + tag
            rm(s2)
            S["import_" + tag].append(timed([exe, "import", "-q", s2, "--step", "1", src]))
            rm(s2)
        print("round %d: %s" % (r + 1, ", ".join("%s %.3f" % (k, v[-1]) for k, v in S.items())),
              flush=True)
finally:
    rm(store), rm(out)
med = {k: statistics.median(v) for k, v in S.items()}
print("medians of %d rounds (%.2f GiB file):" % (runs, os.path.getsize(src) / 2**30))
for k, v in med.items():
    print("  %-11s %7.3f s" % (k, v))
print("export_new / cp_sync %.3f, export_old / cp_sync %.3f, import_new / import_old %.3f"
      % (med["export_new"] / med["cp_sync"], med["export_old"] / med["cp_sync"],
         med["import_new"] / med["import_old"]))
print("export_new / cp_sync_cold %.3f, export_old / cp_sync_cold %.3f"
      % (med["export_new"] / med["cp_sync_cold"], med["export_old"] / med["cp_sync_cold"]))
PY
