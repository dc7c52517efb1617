#!/usr/bin/env python3
"""Computes the figures of docs/architecture.md from the tree and writes them between its
"<!-- figures:begin -->" and "<!-- figures:end -->" lines, so that no figure in the doc is typed
by hand: files and lines per folder, the include graph of lib/ (edges among folders and files,
cycles), the longest files and functions, and the public functions of include/ckpt.h with the
lib/ file that defines each.

    tools/docfigures.py [--check] [DOC]     (run from anywhere; DOC: docs/architecture.md)

Without --check it rewrites the block (`make docfigures`). With --check it changes nothing,
prints a diff of the block and exits 1 when the doc is stale (tests/docs/t-doc-figures.sh).
Exit 2: the doc has no (or a broken) marked block. Only python3 and tools/funclen.sh (the function
lengths that tests/install/t-funclen.sh checks) are used; files are found on disk, not through
git, so a new file counts before it is committed.
"""

import difflib
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BEGIN, END = "<!-- figures:begin -->", "<!-- figures:end -->"
SRC_EXT = (".c", ".h", ".py", ".sh", ".mk")
TOP = 10  # rows of the "longest" tables


def rel(p):
    return os.path.relpath(p, ROOT)


def files_in(folder, exts=SRC_EXT):
    """The source files directly in folder (relative to ROOT), sorted."""
    out = []
    for d, _, names in os.walk(os.path.join(ROOT, folder)):
        out += [rel(os.path.join(d, n)) for n in names if n.endswith(exts)]
        break  # this folder only: lib/gpu/cuda/ is a row of its own
    return sorted(out)


def nlines(path):
    with open(os.path.join(ROOT, path), "rb") as f:
        return f.read().count(b"\n")


def strip_comments(text):
    """C text without comments and string literals (their newlines kept, so lines still count)."""
    def blank(m):
        s = m.group(0)
        if s.startswith("/"):
            return re.sub(r"[^\n]", " ", s)
        return '""' if s.startswith('"') else "''"
    return re.sub(r'/\*.*?\*/|//[^\n]*|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'', blank, text,
                  flags=re.S)


# --------------------------------------------------------------------------- files and lines

def lib_folders():
    """lib/'s folders, each on its own (lib/gpu/cuda apart from lib/gpu)."""
    out = []
    for d, subs, names in os.walk(os.path.join(ROOT, "lib")):
        subs.sort()
        if files_in(rel(d)):
            out.append(rel(d))
    return sorted(out)


def sizes_table():
    rows = [f for f in lib_folders()] + ["include", "cli/common", "cli/ckptctl", "cli/nvmetune",
                                          "python/libckpt"]
    lines = ["| folder | files | lines |", "|---|--:|--:|"]
    tf = tl = 0
    for d in rows:
        fs = files_in(d)
        n = sum(nlines(f) for f in fs)
        tf, tl = tf + len(fs), tl + n
        lines.append(f"| `{d}/` | {len(fs)} | {n:,} |")
    lines.append(f"| all of the above | {tf} | {tl:,} |")
    # tests/, bench/ and the rest are left out: a new test should not make this map stale.
    return lines


# --------------------------------------------------------------------------- include graph

def include_edges():
    """(from, to) file pairs: a file of lib/ that includes a header of lib/ (#include "..."
    resolved beside the file, then under lib/ as -Ilib does). Headers outside lib/ are left out."""
    edges = set()
    srcs = [f for d in lib_folders() for f in files_in(d, (".c", ".h"))]
    known = set(srcs)
    for f in srcs:
        with open(os.path.join(ROOT, f), encoding="utf-8") as fh:
            text = fh.read()
        for inc in re.findall(r'^\s*#\s*include\s+"([^"]+)"', text, re.M):
            for cand in (os.path.normpath(os.path.join(os.path.dirname(f), inc)),
                         os.path.normpath(os.path.join("lib", inc))):
                if cand in known:
                    if cand != f:
                        edges.add((f, cand))
                    break
    return edges


def folder_of(path):
    return os.path.dirname(path)


def sccs(nodes, edges):
    """Strongly connected components of more than one node (Tarjan), each sorted; sorted."""
    adj = {n: sorted(b for a, b in edges if a == n) for n in nodes}
    index, low, on, stack, out, counter = {}, {}, set(), [], [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in adj[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for n in sorted(nodes):
        if n not in index:
            visit(n)
    return sorted(out)


def graph_lines():
    edges = include_edges()
    files = {f for d in lib_folders() for f in files_in(d, (".c", ".h"))}
    fedges = {(folder_of(a), folder_of(b)) for a, b in edges if folder_of(a) != folder_of(b)}
    folders = lib_folders()
    lines = [f"{len(edges)} include edges among the {len(files)} `.c` and `.h` files of lib/; "
             f"{len(fedges)} among its {len(folders)} folders. A folder includes the headers of:",
             "", "| folder | includes headers of |", "|---|---|"]
    for d in folders:
        used = sorted(b for a, b in fedges if a == d)
        lines.append(f"| `{d}/` | {', '.join(f'`{u}/`' for u in used) or '(none)'} |")
    lines.append("")
    for what, nodes, es in (("files", files, edges), ("folders", set(folders), fedges)):
        cyc = sccs(nodes, es)
        if not cyc:
            lines.append(f"Include cycles among lib/'s {what}: none.")
        else:
            lines.append(f"Include cycles among lib/'s {what}: {len(cyc)}:")
            lines += [f"- {' <-> '.join(f'`{c}`' for c in comp)}" for comp in cyc]
    return lines


# --------------------------------------------------------------------------- longest

def longest_files():
    fs = [f for d in lib_folders() for f in files_in(d, (".c", ".h"))]
    top = sorted(((nlines(f), f) for f in fs), key=lambda x: (-x[0], x[1]))[:TOP]
    lines = ["| lib/ file | lines |", "|---|--:|"]
    lines += [f"| `{f}` | {n} |" for n, f in top]
    return lines


def longest_functions():
    parts = (("lib/", [f for d in lib_folders() for f in files_in(d, (".c",))]),
             ("cli/", [f for d in ("cli/common", "cli/ckptctl", "cli/nvmetune")
                       for f in files_in(d, (".c",))]),
             ("python/libckpt/", files_in("python/libckpt", (".py",))))
    lines = []
    for i, (where, fs) in enumerate(parts):
        out = subprocess.run(["sh", os.path.join(ROOT, "tools/funclen.sh")] + fs, cwd=ROOT,
                             env=dict(os.environ, LC_ALL="C"), capture_output=True, text=True,
                             check=True).stdout
        rows = []
        for ln in out.splitlines():
            n, at = ln.split(" ", 1)
            path, func = at.rsplit(":", 1)
            rows.append((int(n), path, func))
        rows.sort(key=lambda r: (-r[0], r[1], r[2]))
        top = TOP if i == 0 else 3
        lines += ["" if i else "", f"{len(rows)} functions in `{where}`; the {top} longest "
                  "(tools/funclen.sh):", "", "| function | file | lines |", "|---|---|--:|"]
        lines += [f"| `{func}` | `{path}` | {n} |" for n, path, func in rows[:top]]
    return lines[1:]


# --------------------------------------------------------------------------- public functions

def public_functions():
    """[(section, name)] of include/ckpt.h's CKPT_API declarations, in header order."""
    with open(os.path.join(ROOT, "include/ckpt.h"), encoding="utf-8") as fh:
        raw = fh.read()
    # Sections: the first line of each "/* -----" banner comment.
    marks = [(m.start(), m.group(1).strip()) for m in
             re.finditer(r"/\* -{10,}\s*\n\s*\*\s*([^\n]*)", raw)]
    text = strip_comments(raw)
    out = []
    # A declaration begins its line with CKPT_API (the macro's own #define does not).
    for m in re.finditer(r"^[ \t]*CKPT_API\b([^;{#]*?)\b([A-Za-z_]\w*)\s*\(", text, re.M):
        name = m.group(2)
        sec = ""
        for pos, title in marks:
            if pos < m.start():
                sec = title
        sec = re.split(r"[:(]", sec)[0].strip().rstrip(".")
        out.append((sec, name))
    return out


def definitions():
    """name -> lib/ file of every non-static function defined in a .c file of lib/."""
    defs = {}
    head = re.compile(r"^(?!static\b)[A-Za-z_][\w \t*]*?\b([A-Za-z_]\w*)\s*\(", re.M)
    for d in lib_folders():
        for f in files_in(d, (".c",)):
            with open(os.path.join(ROOT, f), encoding="utf-8") as fh:
                text = strip_comments(fh.read())
            for m in head.finditer(text):
                i, depth = m.end() - 1, 0
                while i < len(text):  # the parameter list's closing parenthesis
                    depth += {"(": 1, ")": -1}.get(text[i], 0)
                    i += 1
                    if depth == 0:
                        break
                rest = text[i:i + 200].lstrip()
                if rest.startswith("{"):
                    defs.setdefault(m.group(1), f)
    return defs


def index_lines():
    pub = public_functions()
    defs = definitions()
    nmap = 0
    with open(os.path.join(ROOT, "lib/libckpt.map"), encoding="utf-8") as fh:
        nmap = len(re.findall(r"^\s*(ckpt_\w+)\s*;", strip_comments(fh.read()), re.M))
    missing = [n for _, n in pub if n not in defs]
    lines = [f"{len(pub)} public functions are declared `CKPT_API` in `include/ckpt.h`; "
             f"`lib/libckpt.map` exports {nmap} names.",
             "" if not missing else
             f"Declared but defined in no lib/ file: {', '.join(f'`{n}`' for n in missing)}.",
             "| section of ckpt.h | function | defined in |", "|---|---|---|"]
    if not missing:
        del lines[1]
    else:
        lines.insert(2, "")
    last = None
    for sec, name in pub:
        lines.append(f"| {sec if sec != last else ''} | `{name}` | "
                     f"{'`' + defs[name] + '`' if name in defs else '(none)'} |")
        last = sec
    lines.append("")
    per = {}
    for _, name in pub:
        if name in defs:
            per[defs[name]] = per.get(defs[name], 0) + 1
    lines.append("Public functions per file: " +
                 ", ".join(f"`{f}` {n}" for f, n in sorted(per.items())) + ".")
    return lines


# --------------------------------------------------------------------------- the block

def block():
    out = ["<!-- Written by tools/docfigures.py (`make docfigures`); "
           "tests/docs/t-doc-figures.sh fails while it is stale. Do not edit by hand. -->", ""]
    for title, part in (("Files and lines per folder", sizes_table),
                        ("The include graph of lib/", graph_lines),
                        ("The longest files of lib/", longest_files),
                        ("The longest functions", longest_functions),
                        ("Public functions and where they are defined", index_lines)):
        out += [f"### {title}", ""] + part() + [""]
    return "\n".join(out)


def main(argv):
    check = "--check" in argv
    args = [a for a in argv if a != "--check"]
    doc = args[0] if args else os.path.relpath(os.path.join(ROOT, "docs/architecture.md"))
    with open(doc, encoding="utf-8") as fh:
        text = fh.read()
    if text.count(BEGIN) != 1 or text.count(END) != 1 or text.index(BEGIN) > text.index(END):
        print(f"{doc}: needs exactly one '{BEGIN}' line before one '{END}' line", file=sys.stderr)
        return 2
    pre, rest = text.split(BEGIN, 1)
    old, post = rest.split(END, 1)
    new = "\n" + block() + "\n"
    if old == new:
        return 0
    if check:
        sys.stdout.writelines(difflib.unified_diff(
            old.splitlines(True), new.splitlines(True), f"{doc} (as committed)",
            f"{doc} (as the tree is now)"))
        print(f"\nFAIL: the figures of {doc} are stale: run 'make docfigures' (tools/docfigures.py)")
        return 1
    with open(doc, "w", encoding="utf-8") as fh:
        fh.write(pre + BEGIN + new + END + post)
    print(f"{doc}: figures rewritten")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
