#!/usr/bin/env python3
"""The table of `make bench`: every figure of build/bench/results.json that has a target
with its reference, ratio, target and PASS/MISS, in one place. The C, import and
Python benchmarks each print their own part as they run; this prints them together at the end,
from the file, so a closing note can quote one table.

Usage: summary.py [--goals] [RESULTS]   (default $B/bench/results.json, B=build)
       --goals: only the goal lines of libckpt against its peers (bench/python/peers_bench.py),
       one a goal, each starting with PASS, MISS or NOT RUN (how `make bench-peers` ends).
       BENCH_STRICT=1 makes a MISS exit 1."""
import json
import os
import sys

# label, value key, unit, reference key (or None), ratio key, target text, test on the ratio
ROWS = [
    ("full save", "full_save_gbps", "GB/s", "fio_write_best_gbps", "save_vs_fio_best",
     ">= 0.90 x best fio write", lambda r: r >= 0.9),
    ("restore", "restore_gbps", "GB/s", "fio_read_best_gbps", "restore_vs_fio_best",
     ">= 0.95 x best fio read", lambda r: r >= 0.95),
    ("save vs fio 1M qd32", "full_save_gbps", "GB/s", "fio_write_gbps", "save_vs_fio",
     ">= 0.90", lambda r: r >= 0.9),
    ("restore vs fio 1M qd32", "restore_gbps", "GB/s", "fio_read_gbps", "restore_vs_fio",
     ">= 0.90", lambda r: r >= 0.9),
    ("incremental 5%", "incr5_save_seconds", "s", "full_save_seconds", "incr5_vs_full",
     "<= 0.15 x full save", lambda r: r <= 0.15),
    ("snapshot", "snapshot_seconds", "s", "memcpy_seconds", "snapshot_vs_memcpy",
     "<= 1.20 x memcpy", lambda r: r <= 1.2),
    ("pipe ceiling", "ceiling_save_gbps", "GB/s", "floor_copy_hash_gbps",
     "ceiling_vs_threads_x_floor", ">= 0.80 x threads x floor", lambda r: r >= 0.8),
    ("export", "export_seconds", "s", "cp_sync_seconds", "export_vs_cp_sync",
     "< 1.0 x cp + sync", lambda r: r < 1.0),
    ("Python ckpt save", "ckpt_save_seconds", "s", "torch_save_seconds", "py_ckpt_vs_torch",
     "<= 0.20 x torch.save", lambda r: r <= 0.2),
    ("Python ckpt blocking", "ckpt_blocking_seconds", "s", "memcpy_seconds_py",
     "py_blocking_vs_memcpy", "<= 1.20 x memcpy", lambda r: r <= 1.2),
    ("Python ckpt load", "ckpt_load_seconds", "s", "torch_load_seconds", "py_load_vs_torch",
     "<= 1.00 x torch.load", lambda r: r <= 1.0),
    ("1 rank vs fio numjobs=1", "dist_shards_gbps_1", "GB/s", "dist_fio_numjobs_gbps_1",
     "dist_shards_vs_fio_1", ">= 0.90 x fio, same dir", lambda r: r >= 0.9),
    ("2 ranks vs fio numjobs=2", "dist_shards_gbps_2", "GB/s", "dist_fio_numjobs_gbps_2",
     "dist_shards_vs_fio_2", ">= 0.90 x fio, same dir", lambda r: r >= 0.9),
    ("4 ranks vs fio numjobs=4", "dist_shards_gbps_4", "GB/s", "dist_fio_numjobs_gbps_4",
     "dist_shards_vs_fio_4", ">= 0.90 x fio, same dir", lambda r: r >= 0.9),
    ("multi-rank async blocked", "dist_async_blocked_seconds", "s",
     "dist_single_async_blocked_seconds", "dist_async_blocked_vs_single",
     "<= 1.10 x one-process async", lambda r: r <= 1.1),
]

# libckpt against PyTorch DCP (bench/python/dcp_bench.py), at 1 and 4 gloo ranks: libckpt's
# own API (Store.save_async blocked, Store.save durable and 5%-changed) and libckpt as DCP's storage
# ("backend": dcp.async_save / dcp.save with LibckptStorageWriter) against the same DCP call with
# FileSystemWriter, measured in the same run; N=2 and every other figure are in results.json.
for _n in (1, 4):
    for _who, _a, _s, _k in (("own", "ckpt_async", "ckpt_save", ""),
                             ("backend", "ckptdcp_async", "ckptdcp_save", "backend_")):
        ROWS += [
            ("DCP %s blocked N=%d" % (_who, _n), "dcp_%s_blocked_seconds_%d" % (_a, _n), "s",
             "dcp_fs_async_blocked_seconds_%d" % _n, "dcp_%sblocked_vs_async_%d" % (_k, _n),
             "<= 0.50 x dcp.async_save", lambda r: r <= 0.5),
            ("DCP %s durable N=%d" % (_who, _n), "dcp_%s_durable_seconds_%d" % (_s, _n), "s",
             "dcp_fs_save_durable_seconds_%d" % _n, "dcp_%sdurable_vs_save_%d" % (_k, _n),
             "<= 1.00 x dcp.save", lambda r: r <= 1.0),
            ("DCP %s 5%% chg N=%d" % (_who, _n), "dcp_%s_incr5_durable_seconds_%d" % (_s, _n), "s",
             "dcp_fs_save_incr5_durable_seconds_%d" % _n, "dcp_%sincr5_vs_save_%d" % (_k, _n),
             "<= 0.10 x dcp.save, 5% chg", lambda r: r <= 0.1),
        ]
# bench/remote_bench.sh: a checkpoint to S3 (radosgw) and back against
# `aws s3 cp --recursive` of the store; the ratios are aws seconds / libckpt seconds.
ROWS += [
    ("S3 upload vs aws s3 cp", "remote_push_seconds", "s", "aws_upload_seconds",
     "remote_upload_vs_aws", ">= 1.0 (aws s / ckpt s)", lambda r: r >= 1.0),
    ("S3 download vs aws s3 cp", "remote_pull_seconds", "s", "aws_download_seconds",
     "remote_download_vs_aws", ">= 1.0 (aws s / ckpt s)", lambda r: r >= 1.0),
    ("S3 5%-changed push", "remote_incr5_sent_mib", "MiB", "remote_incr5_new_mib",
     "remote_incr5_sent_vs_new", "<= 1.05 x new bytes", lambda r: r <= 1.05),
]

# Figures without a target of their own, shown for context.
INFO = [
    ("fio write best (median)", "fio_write_best_gbps", "GB/s", "fio_write_best_at"),
    ("fio read best (median)", "fio_read_best_gbps", "GB/s", "fio_read_best_at"),
    ("fio write, best sample", "fio_write_best_sample_gbps", "GB/s", None),
    ("fio read, best sample", "fio_read_best_sample_gbps", "GB/s", None),
    ("fio write 1M qd32", "fio_write_gbps", "GB/s", None),
    ("fio read 1M qd32", "fio_read_gbps", "GB/s", None),
    ("memcpy (pinned)", "memcpy_gbps", "GB/s", None),
    ("copy+hash floor", "floor_copy_hash_gbps", "GB/s", None),
    ("cp + sync, cold source", "cp_sync_cold_seconds", "s", None),
    ("import (step 1)", "import1g_seconds", "s", None),
    ("re-import 5%", "reimport5_seconds", "s", None),
    ("4 ranks, shards", "dist_shards_gbps", "GB/s", None),
    ("async vs N one-process", "dist_async_blocked_vs_singles", "x", None),
    ("commit, 4 ranks", "dist_commit_seconds_4", "s", None),
    ("commit, 16 ranks", "dist_commit_seconds_16", "s", None),
    ("commit, 64 ranks", "dist_commit_seconds_64", "s", None),
    ("commit, 256 ranks", "dist_commit_seconds_256", "s", None),
]

INFO += [("S3 restore without pull", "remote_restore_seconds", "s", None),
         ("aws s3 cp down + sync", "aws_download_sync_seconds", "s", None),
         ("S3 pull vs aws + sync", "remote_download_vs_aws_sync", "x", None)]


def fmt(v):
    return "%.3f" % v if isinstance(v, (int, float)) else "-"


def peer_lines(res):
    """The goals of libckpt against its peers (peers_goals: computed by peers_bench.py from the
    figures of one run, each against the best peer of that run)."""
    out = []
    for g in res.get("peers_goals", []):
        if g["result"] == "NOT RUN":
            out.append("%-8s %s (%s): %s; target %s" % ("NOT RUN", g["goal"], g["at"], g["why"],
                                                        g["target"]))
        else:
            out.append("%-8s %s (%s): %.3f %s against %.3f %s (%s): %.2f, target %s" % (
                g["result"], g["goal"], g["at"], g["value"], g["unit"], g["reference"],
                g["unit"], g["ref_what"], g["ratio"], g["target"]))
    return out


def main():
    args = sys.argv[1:]
    goals_only = bool(args) and args[0] == "--goals"
    args = args[1:] if goals_only else args
    path = args[0] if args else os.path.join(os.environ.get("B", "build"), "bench", "results.json")
    try:
        with open(path) as f:
            res = json.load(f)
    except (OSError, ValueError) as e:
        sys.exit("summary: cannot read %s: %s" % (path, e))
    if goals_only:
        lines = peer_lines(res)
        print("\n".join(lines) if lines else "NOT RUN  libckpt against its peers: no peers_goals "
              "in %s (make bench-peers)" % path)
        return
    print("\nlibckpt bench summary (%s, %s; %s CPUs, load average %s at start, %s at end of the C part)"
          % (path, res.get("bench_time", "?"), res.get("cpus", "?"), res.get("load_avg_start", "?"),
             res.get("load_avg_end", "?")))
    print("%-24s %9s %-5s %10s %8s  %-26s %s" % ("figure", "value", "", "reference", "ratio",
                                                "target", "result"))
    missed = 0
    for label, key, unit, ref, rkey, target, test in ROWS:
        if key not in res:
            print("%-24s %9s %-5s %10s %8s  %-26s %s" % (label, "-", unit, "-", "-", target,
                                                        "NOT RUN"))
            continue
        r = res.get(rkey)
        if rkey == "ceiling_vs_threads_x_floor" and r is not None:
            target = target.replace("threads", "%s thr" % res.get("ceiling_threads", "?"))
        ok = r is not None and test(r)
        missed += not ok
        print("%-24s %9s %-5s %10s %8s  %-26s %s" % (label, fmt(res[key]), unit, fmt(res.get(ref)),
                                                    fmt(r), target, "PASS" if ok else "MISS"))
    print()
    for label, key, unit, at in INFO:
        if key in res:
            print("%-24s %9s %-5s %s" % (label, fmt(res[key]), unit,
                                         "(bs-qd-jobs %s)" % res[at] if at and at in res else ""))
    lines = peer_lines(res)
    if lines:
        print("\nlibckpt against its peers (%s, %s; bench/python/peers_bench.py)"
              % (res.get("peers_bench_time", "?"), "load average %s at start"
                 % (res.get("peers_load_avg_start") or ["?"])[0]))
        for line in lines:
            print(line)
        missed += sum(line.startswith("MISS") for line in lines)
    if os.environ.get("BENCH_STRICT") == "1" and missed:
        sys.exit(1)


if __name__ == "__main__":
    main()
