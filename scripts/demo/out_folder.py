"""The demo's report folder (``--out``): the demo writes only into a folder it owns.

``--out`` is accepted when it is a new folder, an empty one, or one a demo run marked as its
own with the file :data:`MARKER`; the demo writes the marker before anything else, then its
report, figures and ``OUT/work`` there, and a later run replaces them. Anything else is
refused in one line before any work: a folder holding anything the demo did not write (a
single dotfile included), a symbolic link (to a folder or not: the files would land where it
points), a file. A report folder of a demo run from before the marker (only the demo's own
file names, and ``OUT/work`` stamped by ``scripts.common.work_folder``) is taken as the
demo's and marked.
"""

from __future__ import annotations

from fnmatch import fnmatch
from pathlib import Path

from scripts.common.atomic_files import write_text_atomic
from scripts.common.work_folder import OWNER_STAMP

MARKER = ".written-by-relu-former-demo"
# what a demo run writes into OUT (report.py, loss_plots.py, analyze_attention.py)
DEMO_FILES = ("report.md", "demo_loss.png", "analyze_attention*.md", "analyze_attention_*.png",
              "work")


def _is_demo_file(name: str) -> bool:
    return any(fnmatch(name, pattern) for pattern in DEMO_FILES)


def refusal(out: Path) -> str | None:
    """Why the demo may not write into ``out``, or None when it may."""
    if out.is_symlink():
        return "is a symbolic link"
    if out.exists() and not out.is_dir():
        return "is a file"
    if not out.exists():
        return None
    if (out / "work").is_symlink():  # the fresh run's emptying would follow it
        return "holds work as a symbolic link"
    marker = out / MARKER
    if marker.is_file() and not marker.is_symlink():
        return None
    entries = sorted(entry.name for entry in out.iterdir())
    foreign = [name for name in entries if not _is_demo_file(name)]
    if not entries or (not foreign and (out / "work" / OWNER_STAMP).is_file()):
        return None  # empty, or written by a demo run from before the marker
    return f"holds {(foreign or entries)[0]}, which the demo did not write"


def claim(out: Path) -> None:
    """Make ``out`` the demo's report folder, marked as its own; exit with one line naming
    the folder and the fix when it is not the demo's to write into."""
    problem = refusal(out)
    if problem is not None:
        raise SystemExit(f"--out: {out} {problem}; give a new or empty folder, or one an "
                         f"earlier demo run wrote (it holds {MARKER})")
    try:
        out.mkdir(parents=True, exist_ok=True)
        write_text_atomic(out / MARKER, "the report folder of python -m scripts.demo.demo: a "
                                        "later run replaces its report, figures and work/\n")
    except OSError as error:
        raise SystemExit(f"--out: {out} cannot be made: {error.strerror}") from None
