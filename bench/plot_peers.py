#!/usr/bin/env python3
"""The picture of `make bench-peers`: libckpt beside the tools a user would pick instead, from the
peers_* figures of build/bench/results.json (bench/python/peers_bench.py), one panel per
comparison, in one SVG (build/bench/peers.svg):

  1. durable save, one process (GB/s, each state size): FastPersist, torch.save, dcp.save against
     Store.save and Store.save_async
  2. load (GB/s): DeepNVMe's read + torch.load, torch.load, dcp.load against Store.restore
  3. DCP async, blocked (seconds, 1/2/4 ranks): dcp.async_save with FileSystemWriter's staging,
     DefaultStager on a thread and on its process, against save_async and libckpt.dcp
  4. DCP async, durable and 5%-changed durable (seconds)
  5. S3 (GB/s): s3torchconnector's DCP writer and reader against ckptctl push / pull and the
     remote tier
  6. peak host memory (multiple of the state) of every saver

A method the run did not measure (a peer not installed, a section not asked for) is drawn as a
"not run" mark and named in the note under the picture.  Text stays text (svg.fonttype none) and
the numbers drawn go into the SVG's description as JSON, so a test can read back what was drawn.

Usage: plot_peers.py [RESULTS [OUT]]  (default $B/bench/results.json and peers.svg beside it)
Needs matplotlib (Debian's python3-matplotlib, for /usr/bin/python3); exits 2 without it."""
import json
import os
import sys

LIB = ("ckpt_save", "ckpt_async", "ckptdcp_async", "ckpt_push", "ckpt_remote")
C_LIB, C_PEER = "#1f77b4", "#7f7f7f"

FILE = [("fastpersist", "FastPersist"), ("torch", "torch.save"), ("fs_save", "dcp.save"),
        ("fs_async", "dcp.async_save"), ("fs_stager", "DefaultStager"),
        ("ckpt_save", "Store.save"), ("ckpt_async", "save_async")]
LOADS = [("fastpersist", "DeepNVMe read"), ("torch", "torch.load"), ("fs_save", "dcp.load"),
         ("ckpt_save", "Store.restore")]
DCP = [("fs_async", "FileSystemWriter"), ("fs_stager", "DefaultStager"),
       ("fs_process", "Stager, process"), ("ckpt_async", "save_async"),
       ("ckptdcp_async", "libckpt.dcp")]
S3 = [("s3t", "s3torchconnector"), ("ckpt_push", "ckptctl push/pull"),
      ("ckpt_remote", "remote tier")]


def series(res, prefix, methods, key, groups):
    """[(group label, [(method label, value or None, is libckpt)])], and the methods not run."""
    out, missing = [], []
    for g, sfx in groups:
        row = []
        for m, label in methods:
            st = res.get(f"{prefix}_{m}_status{sfx}")
            if st is None:
                continue
            v = res.get(f"{prefix}_{m}_{key}{sfx}")
            if st != "ok" or not isinstance(v, (int, float)):
                missing.append((label, st[len("not run: "):] if st.startswith("not run: ")
                                else st))
                v = None
            row.append((label, v, m in LIB))
        if row:
            out.append((g, row))
    return out, missing


def panel(ax, title, unit, groups, drawn, name):
    ax.set_title("%s (%s)" % (title, "higher is better" if unit == "GB/s" else "lower is better"),
                 fontsize=9)
    ax.set_ylabel(unit, fontsize=8)
    if not groups or all(v is None for _, row in groups for _, v, _ in row):
        ax.text(0.5, 0.5, "not run", ha="center", va="center", transform=ax.transAxes)
        ax.set_xticks([])
        return
    x, ticks, labels = 0, [], []
    top = max([v for _, row in groups for _, v, _ in row if v is not None] or [1])
    for g, row in groups:
        for label, v, lib in row:
            if v is None:
                ax.text(x, top * 0.02, "not run", rotation=90, ha="center", va="bottom",
                        fontsize=6, color="#d62728")
            else:
                bar = ax.bar(x, v, color=C_LIB if lib else C_PEER, width=0.8)
                bar[0].set_gid(f"{name}:{g}:{label}")
                ax.text(x, v, "%.2f" % v, ha="center", va="bottom", fontsize=6)
                drawn.append({"panel": name, "group": g, "method": label, "value": v})
            ticks.append(x)
            labels.append(label if len(groups) == 1 else f"{label}\n{g}")
            x += 1
        x += 0.6
    ax.set_xticks(ticks)
    ax.set_xticklabels(labels, rotation=60, ha="right", fontsize=6)
    ax.tick_params(axis="y", labelsize=7)


def main():
    args = sys.argv[1:]
    path = args[0] if args else os.path.join(os.environ.get("B", "build"), "bench", "results.json")
    out = args[1] if len(args) > 1 else os.path.join(os.path.dirname(path), "peers.svg")
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("plot_peers: no matplotlib for %s (Debian: python3-matplotlib)" % sys.executable)
        sys.exit(2)
    try:
        with open(path) as f:
            res = json.load(f)
    except (OSError, ValueError) as e:
        sys.exit("plot_peers: cannot read %s: %s" % (path, e))
    if "peers_bench_time" not in res:
        sys.exit("plot_peers: %s has no peers_* figures (make bench-peers)" % path)
    sizes = [(s, f"_{s}") for s in res.get("peers_sizes", [])]
    worlds = [(f"N={n}", f"_{n}") for n in res.get("peers_worlds", [])]
    one = [("", "")]
    missing, drawn = [], []
    panels = []
    for title, unit, prefix, methods, key, groups in (
            ("durable save, one process", "GB/s", "peers_file", FILE, "durable_gbps", sizes),
            ("load, one process", "GB/s", "peers_file", LOADS, "load_gbps", sizes),
            ("DCP async: blocked", "s", "peers_dcp", DCP, "blocked_seconds", worlds),
            ("DCP async: durable", "s", "peers_dcp", DCP, "durable_seconds", worlds),
            ("DCP async: 5%-changed durable", "s", "peers_dcp", DCP, "incr5_durable_seconds",
             worlds),
            ("S3 up (save or push)", "GB/s", "peers_s3", S3, "up_gbps", one),
            ("S3 down (load or pull)", "GB/s", "peers_s3", S3, "down_gbps", one),
            ("peak memory, one process", "x state", "peers_file", FILE, "peak_x", sizes),
            ("peak memory, DCP ranks", "x state", "peers_dcp", DCP, "peak_x", worlds)):
        g, miss = series(res, prefix, methods, key, groups)
        panels.append((title, unit, g, prefix + ":" + key))
        missing += [m for m in miss if m not in missing]
    plt.rcParams["svg.fonttype"] = "none"
    fig, axes = plt.subplots(3, 3, figsize=(15, 12))
    for ax, (title, unit, g, name) in zip(axes.flat, panels):
        panel(ax, title, unit, g, drawn, name)
    la = res.get("peers_load_avg_start") or [0]
    note = ("libckpt (blue) against its peers (grey), one run, medians of %s (%s, load average "
            "%.1f at start, %s)" % (res.get("peers_runs"), res.get("peers_bench_time"), la[0],
                                    res.get("peers_torch")))
    if res.get("peers_sections_kept"):
        note += "; sections %s from the run before (BENCH_PEERS_KEEP)" % ", ".join(
            res["peers_sections_kept"])
    why = {}
    for label, reason in missing:
        why.setdefault(reason[:100], set()).add(label)
    if why:
        note += "\nnot run: " + "; ".join("%s (%s)" % (", ".join(sorted(labels)), reason)
                                          for reason, labels in sorted(why.items()))[:1200]
    fig.text(0.01, 0.005, note, fontsize=6, va="bottom", wrap=True)
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    fig.savefig(out, metadata={"Description": json.dumps(drawn)})
    print("plot_peers: %d bars drawn, %d not run, into %s" % (len(drawn), len(missing), out))


if __name__ == "__main__":
    main()
