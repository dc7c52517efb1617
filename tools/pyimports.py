#!/usr/bin/env python3
"""Prints the import graph among the Python modules of the given directories, one edge a line:
"FROM TO NAME" (FROM imports NAME of TO; modules named DIR/MODULE, without .py). Only imports of a
module of the same directory count (relative, or absolute by a sibling's name), at module level or
inside a function alike: a circle through a deferred import is still a circle among files.
Used by tests/install/t-modgraph.sh. Usage: tools/pyimports.py DIR..."""
import ast
import os
import sys


def bound_names(path):
    """The names a module binds at its top level (assignments, imports, defs)."""
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), path)
    names = set()
    for node in tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
    return names


def edges(d):
    mods = {f[:-3] for f in os.listdir(d) if f.endswith(".py")}
    pkg = os.path.isfile(os.path.join(d, "__init__.py"))
    init_names = bound_names(os.path.join(d, "__init__.py")) if pkg else set()
    for m in sorted(mods):
        path = os.path.join(d, m + ".py")
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read(), path)
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                # "from . import X": X is a sibling module, or a name the package's __init__
                # binds; anything else is a module generated at install time (_installed).
                if node.level == 1 and node.module is None and pkg:
                    for a in node.names:
                        if a.name in mods:
                            yield m, a.name, a.name
                        elif a.name in init_names:
                            yield m, "__init__", a.name
                elif node.level == 1 and pkg and node.module.split(".")[0] in mods:
                    yield m, node.module.split(".")[0], ",".join(a.name for a in node.names)
                elif node.level == 0 and node.module and node.module.split(".")[0] in mods:
                    yield m, node.module.split(".")[0], ",".join(a.name for a in node.names)
            elif isinstance(node, ast.Import):
                for a in node.names:
                    if a.name.split(".")[0] in mods:
                        yield m, a.name.split(".")[0], a.name


def main():
    for d in sys.argv[1:]:
        d = d.rstrip("/")
        for a, b, name in edges(d):
            if a != b:
                print(f"{d}/{a} {d}/{b} {name}")


if __name__ == "__main__":
    main()
