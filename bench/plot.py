#!/usr/bin/env python3
"""The picture of `make bench`: build/bench/results.json drawn as one SVG with two panels.

  1. Throughput (GB/s), each operation of libckpt beside its reference measured in the same run on
     the same data: a save and a restore against fio on the same directory (its best setting and
     1 MiB at queue depth 32), `ckptctl export` against cp + sync of the same file, and the Python
     binding's save and load against torch.save and torch.load of the same state.
  2. Where a save's time goes (seconds): the time the caller is blocked, of it the library's own
     snapshot (the copy into the pinned pool), and the persist that runs after the caller goes on
     (hash, write, fsync, commit), for the C full save, the C 5%-changed save and the Python
     save_async; beside them memcpy of the same state (the snapshot's floor) and torch.save (which
     blocks for all of it).

An operation whose figures the run did not measure is left out and named in the picture's note,
so a partial run still draws. Text stays text (svg.fonttype none), and every bar carries an id and
the numbers drawn are written into the SVG's description as JSON, so that tests can read back what
was drawn.

Usage: plot.py [RESULTS [OUT]]  (default $B/bench/results.json and results.svg beside it, B=build)
Needs matplotlib (Debian: python3-matplotlib); exits 2 with a one-line message without it."""
import json
import os
import sys

C_LIB, C_REF, C_REF2 = "#1f77b4", "#7f7f7f", "#bdbdbd"
C_SNAP, C_BLOCK, C_PERSIST = "#d62728", "#ff9896", "#9ecae1"


def gbps(res, nbytes_key, seconds_key):
    """GB/s from a byte count and a time in results.json, or None when either is missing."""
    b, s = res.get(nbytes_key), res.get(seconds_key)
    if not isinstance(b, (int, float)) or not isinstance(s, (int, float)) or s <= 0:
        return None
    return b / s / 1e9


def throughput_rows(res):
    """[(operation, [(label, GB/s, colour, id)])]: libckpt first, then its references."""
    exp = lambda k: gbps(res, "import_file_bytes", k)
    py = lambda k: gbps(res, "py_state_bytes", k)
    rows = [
        ("save (C API)", [("libckpt save", res.get("full_save_gbps"), C_LIB, "save-libckpt"),
                          ("fio write, best", res.get("fio_write_best_gbps"), C_REF, "save-fio-best"),
                          ("fio write 1M qd32", res.get("fio_write_gbps"), C_REF2, "save-fio")]),
        ("restore (C API)", [("libckpt restore", res.get("restore_gbps"), C_LIB, "restore-libckpt"),
                             ("fio read, best", res.get("fio_read_best_gbps"), C_REF,
                              "restore-fio-best"),
                             ("fio read 1M qd32", res.get("fio_read_gbps"), C_REF2, "restore-fio")]),
        ("export to safetensors", [("ckptctl export", exp("export_seconds"), C_LIB,
                                    "export-libckpt"),
                                   ("cp + sync", exp("cp_sync_seconds"), C_REF, "export-cp")]),
        ("Python save", [("libckpt save", py("ckpt_save_seconds"), C_LIB, "pysave-libckpt"),
                         ("torch.save", py("torch_save_seconds"), C_REF, "pysave-torch")]),
        ("Python load", [("libckpt load", py("ckpt_load_seconds"), C_LIB, "pyload-libckpt"),
                         ("torch.load", py("torch_load_seconds"), C_REF, "pyload-torch")]),
    ]
    # An operation is drawn when libckpt's own figure and at least one reference were measured.
    return [(op, [b for b in bars if b[1] is not None]) for op, bars in rows
            if bars[0][1] is not None and any(b[1] is not None for b in bars[1:])]


def split_rows(res):
    """[(save, blocked s, library snapshot s or None, total s, reference label, reference s, id)].
    The persist is total - blocked; the snapshot is part of the blocked time."""
    rows = []
    full, blocked = res.get("full_save_seconds"), res.get("snapshot_seconds")
    if full and blocked is not None:
        rows.append(("C full save", blocked, res.get("lib_snapshot_seconds"), full, "memcpy",
                     res.get("memcpy_seconds"), "split-c-full"))
    incr = res.get("incr5_save_seconds")
    if incr:
        # The bench times the 5%-changed save whole: blocked and persist are not told apart.
        rows.append(("C 5%-changed save", None, None, incr, None, None, "split-c-incr5"))
    ptotal, pblocked = res.get("ckpt_async_total_seconds"), res.get("ckpt_blocking_seconds")
    if ptotal and pblocked is not None:
        rows.append(("Python save_async", pblocked, res.get("py_lib_snapshot_seconds"), ptotal,
                     "torch.save", res.get("torch_save_seconds"), "split-py"))
    return rows


def draw_throughput(ax, rows, drawn):
    # Each bar is labelled with what it is: one legend for all would repeat its colours.
    y, ticks, labels, top_v = 0.0, [], [], 0.0
    for op, bars in rows:
        top = y
        for label, v, colour, gid in bars:
            b = ax.barh(y, v, height=0.8, color=colour)[0]
            b.set_gid("bar-" + gid)
            ax.text(v, y, " %s  %.2f" % (label, v), va="center", fontsize=8)
            drawn[gid] = round(v, 4)
            top_v = max(top_v, v)
            y += 1
        ticks.append((top + y - 1) / 2)
        labels.append(op)
        y += 0.8
    ax.set_yticks(ticks, labels)
    ax.set_xlim(0, top_v * 1.45)
    ax.invert_yaxis()
    ax.set_xlabel("GB/s (higher is better); blue: libckpt, grey: the reference")
    ax.set_title("Throughput: libckpt and its references, same run, same data")


def draw_split(ax, rows, drawn):
    names, top_v = [], 0.0
    for i, (name, blocked, snap, total, ref, ref_s, gid) in enumerate(rows):
        names.append(name)
        y = 2 * i
        if blocked is None:
            b = ax.barh(y, total, color=C_PERSIST, hatch="//", label=None)[0]
            ax.text(total, y, " %.3f s, not split" % total, va="center", fontsize=8)
            drawn[gid] = {"total": round(total, 4)}
        else:
            rest = max(blocked - (snap or 0), 0)
            ax.barh(y, snap or 0, color=C_SNAP, label="snapshot (blocked)" if i == 0 else None)
            ax.barh(y, rest, left=snap or 0, color=C_BLOCK,
                    label="other blocked time" if i == 0 else None)
            b = ax.barh(y, max(total - blocked, 0), left=blocked, color=C_PERSIST,
                        label="persist (caller runs on)" if i == 0 else None)[0]
            ax.text(total, y, " blocked %.3f s of %.3f s" % (blocked, total), va="center",
                    fontsize=8)
            drawn[gid] = {"blocked": round(blocked, 4), "snapshot": round(snap or 0, 4),
                          "persist": round(max(total - blocked, 0), 4)}
        b.set_gid("bar-" + gid)
        top_v = max(top_v, total, ref_s or 0)
        if ref_s:
            r = ax.barh(y + 0.8, ref_s, height=0.5, color=C_REF)[0]
            r.set_gid("bar-%s-ref" % gid)
            ax.text(ref_s, y + 0.8, " %s %.3f s" % (ref, ref_s), va="center", fontsize=8)
            drawn[gid]["reference"] = {ref: round(ref_s, 4)}
    ax.set_yticks([2 * i for i in range(len(rows))], names)
    ax.set_xlim(0, top_v * 1.45)
    ax.invert_yaxis()
    ax.set_xlabel("seconds (shorter is better); grey: the reference")
    ax.set_title("Where a save's time goes")
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.22), ncol=3, frameon=False)


def missing_note(res, trows, srows):
    want = {"save (C API)", "restore (C API)", "export to safetensors", "Python save",
            "Python load"}
    miss = sorted(want - {op for op, _ in trows})
    return "not measured in this run: " + ", ".join(miss) if miss else ""


def main():
    b = os.environ.get("B", "build")
    src = sys.argv[1] if len(sys.argv) > 1 else os.path.join(b, "bench", "results.json")
    out = sys.argv[2] if len(sys.argv) > 2 else os.path.join(os.path.dirname(src), "results.svg")
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        sys.stderr.write("plot: matplotlib is not installed (Debian: apt-get install "
                         "python3-matplotlib): no picture\n")
        return 2
    try:
        with open(src) as f:
            res = json.load(f)
    except (OSError, ValueError) as e:
        sys.stderr.write("plot: cannot read %s: %s\n" % (src, e))
        return 1
    trows, srows = throughput_rows(res), split_rows(res)
    if not trows and not srows:
        sys.stderr.write("plot: %s holds none of the figures drawn (run make bench)\n" % src)
        return 1
    matplotlib.rcParams.update({"svg.fonttype": "none", "svg.hashsalt": "libckpt",
                                "font.size": 9})
    nt = sum(len(bars) for _, bars in trows) + len(trows)
    fig, axes = plt.subplots(2, 1, figsize=(9, 2.2 + 0.28 * nt + 0.6 * len(srows) + 1.5),
                             gridspec_kw={"height_ratios": [max(nt, 1), max(2 * len(srows), 1)]})
    drawn = {}
    if trows:
        draw_throughput(axes[0], trows, drawn)
    else:
        axes[0].set_axis_off()
    if srows:
        draw_split(axes[1], srows, drawn)
    else:
        axes[1].set_axis_off()
    size = res.get("state_bytes")
    head = "libckpt %s, make bench of %s" % (res.get("library_version", "?"),
                                              res.get("bench_time", "?"))
    sub = "state %.2f GiB, %s CPUs, engine %s, O_DIRECT %s" % (
        (size or 0) / 2**30, res.get("cpus", "?"), res.get("engine", "?"),
        res.get("direct_io", "?"))
    note = missing_note(res, trows, srows)
    fig.suptitle(head + "\n" + sub + ("\n" + note if note else ""), fontsize=9)
    fig.tight_layout()
    fig.savefig(out, format=os.path.splitext(out)[1][1:] or "svg",
                metadata={"Title": "libckpt make bench", "Date": None,
                          "Description": json.dumps(drawn, sort_keys=True)}
                if out.endswith(".svg") else None)
    print("plot: wrote %s (%d bars)" % (out, len(drawn)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
