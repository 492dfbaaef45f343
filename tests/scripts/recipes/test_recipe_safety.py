"""What a prepare.sh guarantees against bad luck: a changed input never costs the prepared data
set, two runs on one DATA_ROOT never mix their folders, and archive members that are links,
devices or paths outside the target are refused before anything is unpacked.

Most tests stop the recipe right after its fetch step (``PYTHON`` names no interpreter, so
the next step fails at once): the fetch step is where inputs, locks and temporary folders are
handled, and a run of it takes well under a second.
"""

from __future__ import annotations

import io
import subprocess
import tarfile
import zipfile
from pathlib import Path

import pytest

from helpers import REPO_ROOT, run_command
from recipe_fixtures import build_cohan, build_gigaword, build_iwslt14

IWSLT = REPO_ROOT / "scripts" / "recipes" / "iwslt14_de_en" / "prepare.sh"
ARXIV = REPO_ROOT / "scripts" / "recipes" / "long_doc_summarization" / "prepare.sh"
IWSLT_FILES = ["train.tags.de-en.de", "train.tags.de-en.en"] + [
    f"{name}.de-en.{lang}.xml"
    for name in ("IWSLT14.TED.dev2010", "IWSLT14.TEDX.dev2012", "IWSLT14.TED.tst2010",
                 "IWSLT14.TED.tst2011", "IWSLT14.TED.tst2012")
    for lang in ("de", "en")]


def env_for(root: Path, archive: Path | None = None, python: str | None = None) -> dict:
    env = {"DATA_ROOT": str(root / "data"), "WORKERS": "1", "IWSLT14_BPE_MERGES": "50",
           "PYTHON": python or str(root / "no-python")}
    if archive is not None:
        env["IWSLT14_ARCHIVE"] = str(archive)
    return env


def tree(folder: Path) -> dict:
    """Every entry under folder: file contents, or the target of a link."""
    out = {}
    for p in sorted(folder.rglob("*")):
        rel = str(p.relative_to(folder))
        if p.is_symlink():
            out[rel] = ("link", str(p.readlink()))
        elif p.is_file():
            out[rel] = p.read_bytes()
    return out


def assert_fetched_whole(work: Path) -> None:
    """orig/ is one finished fetch: its marker, every expected file once, nothing nested, no
    temporary folder left."""
    orig = work / "orig"
    assert (orig / ".done").is_file()
    for name in IWSLT_FILES:
        found = list(orig.rglob(name))
        assert len(found) == 1 and found[0].stat().st_size > 0, (name, found)
    assert not list(orig.rglob("orig*")), list(orig.rglob("orig*"))
    assert not list(work.glob("*.tmp.*")), list(work.glob("*.tmp.*"))


# ------------------------------------------------------------------ a changed input
def _prepared(tmp_path: Path) -> tuple[Path, dict]:
    """A data set whose fetch step is done, plus a stand-in for the later steps' outputs
    (text, BPE, data-bin) of that first preparation; its tree before anything else runs."""
    archive = build_iwslt14(tmp_path / "download")
    run_command([IWSLT], env=env_for(tmp_path, archive), check=False)
    work = tmp_path / "data" / "iwslt14_de_en"
    assert (work / "orig" / ".done").is_file()
    (work / "data-bin").mkdir()
    (work / "data-bin" / "train.de-en.de.bin").write_bytes(b"\x01" * 64)
    (work / "data-bin" / ".done").touch()
    return work, tree(work)


def test_a_wrong_input_never_removes_the_prepared_data(tmp_path: Path):
    """A prepared data set and the variable pointed at a wrong archive: the new input is
    checked first, the run stops naming the variable, and not a byte of the old data
    changes."""
    work, before = _prepared(tmp_path)
    wrong = build_gigaword(tmp_path / "other")
    proc = run_command([IWSLT], env=env_for(tmp_path, wrong), check=False)
    assert proc.returncode == 2, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if "error" in line]
    assert len(errors) == 1, proc.stderr
    assert f"IWSLT14_ARCHIVE={wrong} is not the IWSLT14 De-En archive" in errors[0], errors[0]
    assert tree(work) == before


def test_a_valid_other_input_is_refused_while_data_is_prepared_from_the_first(tmp_path: Path):
    """Another valid archive (here: twice the sentences): nothing prepared is removed, the
    run stops naming the variable and the folder to move away."""
    work, before = _prepared(tmp_path)
    other = build_iwslt14(tmp_path / "other", n_train=600)
    # the recipe tells inputs apart by name and size; one more sentence once gave a gzip
    # archive of the very same size, and the run took it for the first
    assert other.stat().st_size != (tmp_path / "download" / other.name).stat().st_size
    proc = run_command([IWSLT], env=env_for(tmp_path, other), check=False)
    assert proc.returncode == 2, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if "error" in line]
    assert len(errors) == 1, proc.stderr
    assert f"IWSLT14_ARCHIVE={other} is another input than the one {work}" in errors[0]
    assert "Nothing was changed" in errors[0] and f"move {work} away" in errors[0]
    assert tree(work) == before


def test_a_valid_other_input_replaces_a_fetch_nothing_was_prepared_from(tmp_path: Path):
    """Only the fetch step done (the next step failed): the right archive replaces it, no
    cleaning up needed."""
    first = build_iwslt14(tmp_path / "download")
    run_command([IWSLT], env=env_for(tmp_path, first), check=False)
    other = build_iwslt14(tmp_path / "other", n_train=301)
    proc = run_command([IWSLT], env=env_for(tmp_path, other), check=False)
    work = tmp_path / "data" / "iwslt14_de_en"
    assert "step fetch: replaced by" in proc.stderr, proc.stderr
    assert (work / "orig" / ".source").read_text().split() == ["de-en.tgz",
                                                               str(other.stat().st_size)]
    assert_fetched_whole(work)
    assert not (work / "orig.next").exists()


# ------------------------------------------------------------------ concurrent runs
def _start(env: dict) -> subprocess.Popen:
    import os

    full = {**os.environ, "OMP_NUM_THREADS": "1", **env}
    return subprocess.Popen([str(IWSLT)], env=full, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


@pytest.mark.parametrize("trial", range(5))
def test_two_prepares_at_once_one_runs_the_other_stops(trial: int, tmp_path: Path):
    """Two prepare.sh started together on one DATA_ROOT: exactly one runs the fetch step, the
    other stops at once with exit code 4 and a message naming the folder, and what the first
    one fetched is whole (its marker, every file once, nothing nested, no temporary folder)."""
    archive = build_iwslt14(tmp_path / "download")
    env = env_for(tmp_path, archive)
    procs = [_start(env), _start(env)]
    outs = [p.communicate(timeout=120) for p in procs]
    codes = [p.returncode for p in procs]
    ran = [i for i, (_, err) in enumerate(outs) if "step fetch: running" in err]
    assert len(ran) == 1, (codes, [e for _, e in outs])
    other = 1 - ran[0]
    work = tmp_path / "data" / "iwslt14_de_en"
    assert codes[other] == 4, outs[other][1]
    assert "another run is preparing" in outs[other][1] and str(work) in outs[other][1]
    assert_fetched_whole(work)
    # the lock goes with the run: the next run goes on from the finished fetch
    again = run_command([IWSLT], env=env, check=False)
    assert "step fetch: done already" in again.stderr, again.stderr
    assert_fetched_whole(work)


@pytest.mark.slow
def test_two_full_prepares_at_once_leave_one_whole_data_set(tmp_path: Path):
    """The same with the real interpreter, every step: one run finishes with a complete
    data-bin, the other stops at once (exit 4), and a third run finds every step done."""
    import sys

    archive = build_iwslt14(tmp_path / "download", n_train=120)
    env = env_for(tmp_path, archive, python=sys.executable)
    procs = [_start(env), _start(env)]
    outs = [p.communicate(timeout=300) for p in procs]
    codes = sorted(p.returncode for p in procs)
    assert codes == [0, 4], (codes, [e[-2000:] for _, e in outs])
    work = tmp_path / "data" / "iwslt14_de_en"
    for step in ("orig", "text", "tok", "bpe", "data-bin"):
        assert (work / step / ".done").is_file(), step
    assert (work / "text" / "train.de").stat().st_size > 0
    for split in ("train", "valid", "test"):
        for lang in ("de", "en"):
            assert (work / "data-bin" / f"{split}.de-en.{lang}.bin").stat().st_size > 0
    assert not list(work.rglob("*.tmp.*"))
    again = run_command([IWSLT], env=env)
    assert again.stderr.count("done already") == 5, again.stderr


# ------------------------------------------------------------------ hostile archives
def _rewrite_tgz(archive: Path, out: Path, replace: str, evil: tarfile.TarInfo,
                 data: bytes | None = None) -> Path:
    """A copy of ``archive`` whose member ending in ``replace`` is ``evil`` instead (kept in
    place) or, with ``replace`` empty, with ``evil`` added."""
    with tarfile.open(archive) as src, tarfile.open(out, "w:gz") as dst:
        for member in src.getmembers():
            if replace and member.name.endswith(replace):
                evil.name = member.name
                dst.addfile(evil, io.BytesIO(data) if data is not None else None)
                continue
            dst.addfile(member, src.extractfile(member) if member.isfile() else None)
        if not replace:
            dst.addfile(evil, io.BytesIO(data) if data is not None else None)
    return out


def _member(kind: str, secret: Path) -> tuple[str, tarfile.TarInfo, bytes | None]:
    if kind == "symlink":
        info = tarfile.TarInfo("x")
        info.type, info.linkname = tarfile.SYMTYPE, str(secret)
        return "train.tags.de-en.en", info, None
    if kind == "hardlink":
        info = tarfile.TarInfo("x")
        info.type, info.linkname = tarfile.LNKTYPE, "de-en/train.tags.de-en.de"
        return "train.tags.de-en.en", info, None
    if kind == "device":
        info = tarfile.TarInfo("de-en/null")
        info.type, info.devmajor, info.devminor = tarfile.CHRTYPE, 1, 3
        return "", info, None
    if kind == "fifo":
        info = tarfile.TarInfo("de-en/pipe")
        info.type = tarfile.FIFOTYPE
        return "", info, None
    data = b"written outside\n"
    name = str(secret.parent / "escaped.txt") if kind == "absolute" else "de-en/../../escaped.txt"
    info = tarfile.TarInfo(name)
    info.size = len(data)
    return "", info, data


@pytest.mark.parametrize("kind", ["symlink", "hardlink", "device", "fifo", "absolute",
                                  "dotdot"])
def test_archive_member_that_is_a_link_device_or_outside_path_is_refused(kind: str,
                                                                         tmp_path: Path):
    secret = tmp_path / "private" / "secret.txt"
    secret.parent.mkdir()
    secret.write_text("a private line no corpus may hold\n")
    good = build_iwslt14(tmp_path / "download")
    replace, info, data = _member(kind, secret)
    evil = _rewrite_tgz(good, tmp_path / "download" / "evil.tgz", replace, info, data)
    proc = run_command([IWSLT], env=env_for(tmp_path, evil), check=False)
    assert proc.returncode == 2, proc.stderr
    assert "refused, nothing was unpacked" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr
    work = tmp_path / "data" / "iwslt14_de_en"
    assert not (work / "orig").exists() and not list(work.glob("orig.tmp.*"))
    assert not list(tmp_path.rglob("escaped.txt"))


def test_zip_member_that_is_a_symlink_is_refused(tmp_path: Path):
    good = build_cohan(tmp_path / "download", "arxiv")
    evil = tmp_path / "download" / "evil-dataset.zip"
    with zipfile.ZipFile(good) as src, zipfile.ZipFile(evil, "w") as dst:
        for item in src.infolist():
            if item.filename.endswith("train.txt"):
                link = zipfile.ZipInfo(item.filename)
                link.create_system = 3  # unix: the mode in the high bits is read
                link.external_attr = 0o120777 << 16
                dst.writestr(link, str(tmp_path / "private.txt"))
            else:
                dst.writestr(item, src.read(item))
    env = {"DATA_ROOT": str(tmp_path / "data"), "WORKERS": "1", "DATASET": "arxiv",
           "ARXIV_ARCHIVE": str(evil), "PYTHON": str(tmp_path / "no-python")}
    proc = run_command([ARXIV], env=env, check=False)
    assert proc.returncode == 2, proc.stderr
    assert "link or a device" in proc.stderr, proc.stderr
    assert not (tmp_path / "data" / "arxiv" / "orig").exists()
