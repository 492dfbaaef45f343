"""A small manual-page fixture: gzip'd man(7) roff pages as Debian installs them.

Each page describes a made-up command that does one thing to one object ("remove a printer
queue"); its NAME line says so, and its body repeats the verb and the object among fixed
prose, options in ``.TP`` lists, font escapes and special characters, so that a tiny model
has something to learn and the reader has real roff to parse. A few files exercise what the
reader must skip: a ``.so`` link, an mdoc page, a page without NAME, a page whose summary
repeats another's, a macro definition and a comment that must not leak into the text.
"""

from __future__ import annotations

import gzip
import itertools
from pathlib import Path

VERBS = ["remove", "create", "list", "copy", "rename", "show", "lock", "send"]
OBJECTS = ["printer queue", "user account", "network route", "disk volume", "mail folder",
           "system clock", "kernel module", "font cache", "cron job", "log file"]

PAGE = r""".\" Generated fixture page; this comment must not reach the text.
.de XX
.  this macro body is not prose
..
.TH {upper} 1 "2024-01-01" "fixture 1.0" "User Commands"
.SH NAME
{name} \- {verb} a {obj}
.SH SYNOPSIS
.B {name}
[\fB\-f\fR] [\fB\-\-force\fR] \fIOBJECT\fR...
.SH DESCRIPTION
.B {name}
will {verb} the \fI{obj}\fR named on the command line.
It is a small tool: to {verb} a {obj} is all it does, and it does it well.
{filler}
.PP
The \(lq{obj}\(rq must exist before you {verb} it\(em{name} checks this first.
.SH OPTIONS
.TP
.BR \-f ", " \-\-force
{verb} the {obj} even when it is in use.
.TP
.BI \-\-name= NAME
use NAME for the {obj}.
.IP \(bu 2
Exit status is 0 when the {obj} could be handled.
.SH "SEE ALSO"
.BR ls (1),
.BR man (7)
"""

FILLER = ("The program reads its settings from the usual places, writes a short message to "
          "the standard output for every object it handles and stops at the first error "
          "unless it is told to go on.")


def page_text(name: str, verb: str, obj: str, repeat: int = 3) -> str:
    """The roff source of one fixture page."""
    return PAGE.format(upper=name.upper(), name=name, verb=verb, obj=obj,
                       filler="\n".join([FILLER] * repeat))


def write_page(folder: Path, file_name: str, text: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / file_name
    data = text.encode("utf-8")
    path.write_bytes(gzip.compress(data) if file_name.endswith(".gz") else data)
    return path


def fixture_pages() -> list[tuple[str, str, str]]:
    """(command name, verb, object) of every regular fixture page."""
    return [(f"{verb}-{obj.split()[0]}{i}", verb, obj)
            for i, (verb, obj) in enumerate(itertools.product(VERBS, OBJECTS))]


def write_fixture_man_pages(man_dir: Path, repeat: int = 3) -> Path:
    """Write the fixture under ``man_dir/man1`` (and one page under ``man8``)."""
    man1 = Path(man_dir) / "man1"
    for name, verb, obj in fixture_pages():
        write_page(man1, f"{name}.1.gz", page_text(name, verb, obj, repeat))
    write_page(man1, "zz-alias.1.gz", ".so man1/remove-printer0.1\n")
    write_page(man1, "zz-bsd.1.gz", ".Dd January 1, 2024\n.Dt ZZ-BSD 1\n.Sh NAME\n.Nm zz-bsd\n"
               ".Nd a page in the mdoc macros\n")
    write_page(man1, "zz-noname.1.gz", ".TH ZZ 1\n.SH DESCRIPTION\nNo name section here.\n")
    # same summary as remove-printer0: kept once
    write_page(man1, "zz-duplicate.1.gz", page_text("zz-duplicate", "remove", "printer queue",
                                                    repeat))
    write_page(Path(man_dir) / "man8", "plain-page.8",  # uncompressed pages are read too
               page_text("plain-page", "reset", "system clock", repeat))
    return Path(man_dir)
