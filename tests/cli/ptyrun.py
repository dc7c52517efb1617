#!/usr/bin/env python3
"""Runs a command with its standard error on a pseudo-terminal (standard output on a pipe) and
describes the progress lines it drew, in words that do not depend on timing, for a golden file.

Usage: ptyrun.py CMD [ARGS...]

A progress line is "LABEL [bar of 30 # and .] NN% DONE / TOTAL, RATE/s, ETA M:SS" (or ", ETA
--:--" before a rate is known), each drawn after "\\r\\033[K" (return, clear the line). Prints the
exit status, the labels drawn in order (each once), whether every line was well-formed and
within 100%, the total each label's lines showed (from the first line on: a total known only
later shows as "A then B"), whether the last one was cleared, and any other text on standard
error.
"""
import os
import pty
import re
import subprocess
import sys

FRAME = re.compile(r"^(?P<label>.+?) \[[#.]{30}\] +(?P<pct>\d+)% [0-9.]+ [KMGT]?i?B / "
                   r"(?P<total>[0-9.]+ [KMGT]?i?B), ([0-9.]+ [KMGT]?i?B/s, ETA (\d+:)?\d+:\d\d|ETA --:--)$")
CLEAR = "\r\x1b[K"


def main():
    master, slave = pty.openpty()
    p = subprocess.Popen(sys.argv[1:], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                         stderr=slave)
    os.close(slave)
    err = b""
    while True:
        try:
            b = os.read(master, 65536)
        except OSError:  # EIO: the command and its children closed the terminal
            break
        if not b:
            break
        err += b
    out = p.stdout.read()
    rc = p.wait()
    text = err.decode("utf-8", "replace").replace("\r\n", "\n")  # the tty's output translation
    parts = text.split(CLEAR)
    labels, bad, other = [], [], [parts[0]] if parts[0] else []
    totals = {}  # label: the totals its lines showed, in order, each once
    for seg in parts[1:]:
        if not seg:
            continue
        m = FRAME.match(seg)
        if m and int(m.group("pct")) <= 100:
            if m.group("label") not in labels:
                labels.append(m.group("label"))
            t = totals.setdefault(m.group("label"), [])
            if m.group("total") not in t:
                t.append(m.group("total"))
            continue
        # A message after a cleared line: not a frame, but must not hold one.
        if FRAME.match(seg.split("\n")[0]) or "[" in seg.split("\n")[0] and "%" in seg:
            bad.append(seg)
        else:
            other.append(seg)
    print(f"exit status: {rc}")
    lines = out.count(b"\n")
    print(f"standard output: {lines} lines")
    print("progress lines: " + (", ".join(labels) if labels else "none"))
    print("every progress line well-formed: " + ("yes" if not bad else f"no: {bad!r}"))
    # The total is known before the first line: a line never shows one total, then another.
    print("totals: " + ("; ".join(f"{k}: {' then '.join(v)}" for k, v in totals.items())
                        if totals else "none"))
    # Cleared at the end: nothing follows the last clear but messages (no frame left standing).
    print("line cleared at the end: " + ("no" if FRAME.match(parts[-1]) else "yes"))
    for o in other:
        print("other: " + o.rstrip("\n"))


main()
