"""The `ckptctl` command of a pip-installed libckpt: the wheel carries the C program
(libckpt/_native/ckptctl, beside the library it links) and this console entry point runs it, so
`pip install` gives the command the README's recipes use.  The program finds libckpt.so.0
through LD_LIBRARY_PATH (its own runpath, $ORIGIN/../lib, is where `make install` puts it)."""

import os
import sys


def _program():
    here = os.path.dirname(os.path.abspath(__file__))
    cands = [os.path.join(here, "_native", "ckptctl")]
    # an editable install (pip install -e ./python) runs the source tree's package: its build
    root = os.path.dirname(os.path.dirname(here))
    cands += [os.path.join(root, b, "bin", "ckptctl") for b in ("build", "build/wheel")]
    for c in cands:
        if os.access(c, os.X_OK):
            return c
    return None


def main():
    prog = _program()
    if prog is None:
        sys.stderr.write("ckptctl: this libckpt package carries no ckptctl program (an editable "
                         "install whose source tree is not built: run make in it)\n")
        return 127
    libdir = os.path.join(os.path.dirname(prog), "..", "lib") \
        if os.path.basename(os.path.dirname(prog)) == "bin" else os.path.dirname(prog)
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = os.pathsep.join(
        p for p in (os.path.normpath(libdir), env.get("LD_LIBRARY_PATH")) if p)
    os.execve(prog, ["ckptctl"] + sys.argv[1:], env)
    return 127  # not reached


if __name__ == "__main__":
    sys.exit(main())
