"""The README and docs/ say what the code does, and only what a clone of the repository holds.

- every registered name has a README row linking to a section of its component's page, and
  that section names it;
- the README stays a quick start (<= 250 lines, its sections in order);
- nothing outside tests/ cites a file that is not in the repository, or an issue number;
- every relative link (files and #anchors) in README.md and docs/ resolves;
- the README's train / generate / interactive blocks run, as written, on a tiny corpus.
"""

from __future__ import annotations

import re
import shlex
import subprocess
from pathlib import Path

import pytest
from fairseq.criterions import CRITERION_REGISTRY
from fairseq.models import ARCH_CONFIG_REGISTRY
from fairseq.tasks import TASK_REGISTRY

from relu_former.help import plugin_names
from scripts.recipes.lib.prepare_text import (
    apply_bpe,
    learn_bpe,
    moses_tokenize,
    sentencepiece_encode,
    train_sentencepiece,
)

from helpers import (
    REPO_ROOT,
    TINY_MODEL_ARGS,
    TINY_TRAIN_ARGS,
    USER_DIR,
    assert_generation_output,
    fairseq_command,
    preprocess,
    run_command,
    write_toy_parallel_corpus,
)

README = REPO_ROOT / "README.md"
DOCS = REPO_ROOT / "docs"
README_MAX_LINES = 250
README_SECTIONS = ["Set-up", "Registered names", "Train, generate, interactive",
                   "What `make demo` shows", "Documentation"]

# The docs page of each module that registers names (the module's last dotted component).
# A registering module's docs page, by the module's dotted path without the package prefix.
PAGE_OF_MODULE = {
    "relu_attention.model": "relu_former.md",
    "criterions.regularized": "relu_former.md",
    "criterions.sparse_softmax_cross_entropy": "sparse_softmax.md",
    "criterions.sparse_softmax_sentence_prediction": "sparse_softmax.md",
    "sparse_softmax.decoding": "sparse_softmax.md",
    "pyramidion.model": "pyramidion.md",
}
REGISTRIES = {"arch": ARCH_CONFIG_REGISTRY, "criterion": CRITERION_REGISTRY,
              "task": TASK_REGISTRY}
REGISTERED = [(kind, name) for kind, names in plugin_names().items() for name in names]

# Whatever a user cannot open from a clone: the developers' notes and the issue tracker.
OUTSIDE_REFERENCES = [
    r"(?-i:\bDESIGN(?:\.md\b|\s*§))",
    r"\.\./shared\b",
    r"\bshared/DESIGN",
    r"\bissues?\s*#?\d+",
    r"\b(?:see|in|of|from|per|for|fixes|closes)\s+#\d+\b",
]

FENCE = re.compile(r"^\s*(```|~~~)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")


# ------------------------------------------------------------------------------- markdown
def markdown_files() -> list[Path]:
    return [README, *sorted(DOCS.rglob("*.md"))]


def prose_lines(text: str) -> list[tuple[str, bool]]:
    """Each line with whether it lies outside a fenced code block."""
    out, fenced = [], False
    for line in text.splitlines():
        if FENCE.match(line):
            fenced = not fenced
            out.append((line, False))
            continue
        out.append((line, not fenced))
    return out


def slug(title: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    title = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", title)  # a link keeps its text
    title = title.strip().lower()
    title = re.sub(r"[^\w\- ]", "", title)
    return title.replace(" ", "-")


def headings(text: str) -> list[tuple[int, str, str, int]]:
    """(level, title, anchor, line index) of every heading outside code blocks."""
    found, seen = [], {}
    for index, (line, prose) in enumerate(prose_lines(text)):
        match = HEADING.match(line) if prose else None
        if not match:
            continue
        anchor = slug(match.group(2))
        count = seen.get(anchor, 0)
        seen[anchor] = count + 1
        found.append((len(match.group(1)), match.group(2),
                      anchor if count == 0 else f"{anchor}-{count}", index))
    return found


def section(text: str, anchor: str) -> str | None:
    """The text under the heading with ``anchor``, up to the next heading of its level or above."""
    lines = text.splitlines()
    marks = headings(text)
    for i, (level, _, found, start) in enumerate(marks):
        if found == anchor:
            end = next((line for lvl, _, _, line in marks[i + 1:] if lvl <= level), len(lines))
            return "\n".join(lines[start:end])
    return None


def links(path: Path) -> list[str]:
    targets = []
    for line, prose in prose_lines(path.read_text()):
        if prose:
            line = re.sub(r"`[^`]*`", "", line)  # code spans are not links
            targets += LINK.findall(line)
    return targets


def registered_table() -> str:
    text = README.read_text()
    return text.split("<!-- BEGIN registered -->")[1].split("<!-- END registered -->")[0]


# ------------------------------------------------------------------- registered names
def test_registered_names_table_lists_only_registered_names():
    names = {name for _, name in REGISTERED}
    rows = re.findall(r"^\|\s*`([^`]+)`\s*\|", registered_table(), flags=re.M)
    assert rows, "README's registered-names table has no rows"
    assert set(rows) <= names, f"README rows for names nothing registers: {set(rows) - names}"


@pytest.mark.parametrize("kind,name", REGISTERED)
def test_every_registered_name_has_a_section_in_its_docs_page(kind, name):
    module = REGISTRIES[kind][name].__module__.split(".", 1)[-1]
    assert module in PAGE_OF_MODULE, (
        f"--{kind} {name} is registered by a module ({module}) with no docs page: add it to "
        "PAGE_OF_MODULE in tests/test_docs.py")
    page = PAGE_OF_MODULE[module]
    row = next((line for line in registered_table().splitlines()
                if line.startswith(f"| `{name}` |")), None)
    assert row is not None, f"README's table of registered names lacks `{name}`"
    target = re.findall(r"\]\((docs/[^)#]+)#([^)]+)\)", row)
    assert target, f"README's row for `{name}` links to no docs section (docs/PAGE.md#anchor)"
    linked_page, anchor = target[-1]
    assert linked_page == f"docs/{page}", (
        f"README's row for `{name}` links to {linked_page}; its component's page is docs/{page}")
    text = (DOCS / page).read_text()
    body = section(text, anchor)
    assert body is not None, (
        f"docs/{page} has no heading with anchor #{anchor} (README's link for `{name}`); "
        f"its anchors: {[a for _, _, a, _ in headings(text)]}")
    assert f"`{name}`" in body, f"docs/{page}#{anchor} does not mention `{name}`"


# --------------------------------------------------------------------------- the README
def test_readme_is_a_short_quick_start_in_order():
    lines = README.read_text().splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines (at most 250)"
    titles = [title for level, title, _, _ in headings(README.read_text()) if level == 2]
    positions = []
    for wanted in README_SECTIONS:
        found = [i for i, title in enumerate(titles) if title.startswith(wanted)]
        assert found, f"README.md lacks a '## {wanted}' section; it has {titles}"
        positions.append(found[0])
    assert positions == sorted(positions), f"README.md sections out of order: {titles}"


def test_readme_points_to_user_dir_not_to_unsafe_loading():
    paragraphs = re.split(r"\n\s*\n", README.read_text())
    note = [p for p in paragraphs if "weights_only" in p]
    assert note, "README.md says nothing about torch's weights_only error"
    assert any("--user-dir relu_former" in p for p in note), "the fix (--user-dir) is not given"
    for p in paragraphs:
        if "TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD" in p:
            assert re.search(r"\b(don't|do not|never)\b", p, flags=re.I), (
                f"README.md mentions TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD without warning off:\n{p}")


# ------------------------------------------------------------- nothing outside the repo
def tracked_text_files() -> list[Path]:
    proc = subprocess.run(["git", "ls-files", "-z"], cwd=REPO_ROOT, capture_output=True)
    if proc.returncode != 0:
        pytest.skip("not a git checkout: no list of the repository's files")
    files = []
    for name in proc.stdout.decode().split("\0"):
        path = REPO_ROOT / name
        if name and not name.startswith("tests/") and path.is_file():
            files.append(path)
    return files


def test_nothing_outside_tests_cites_files_or_issues_a_clone_lacks():
    pattern = re.compile("|".join(f"(?:{p})" for p in OUTSIDE_REFERENCES), flags=re.I | re.M)
    hits = []
    for path in tracked_text_files():
        try:
            text = path.read_text()
        except UnicodeDecodeError:  # images, binaries
            continue
        for match in pattern.finditer(text):
            line = text.count("\n", 0, match.start()) + 1
            hits.append(f"{path.relative_to(REPO_ROOT)}:{line}: {match.group(0).strip()}")
    assert not hits, "references a clone of the repository cannot follow:\n" + "\n".join(hits)


def test_anchors_into_docs_pages_from_code_exist():
    """``docs/PAGE.md#anchor`` in code and scripts (docstrings, comments) names a real heading."""
    reference = re.compile(r"docs/([\w/-]+\.md)#([\w-]+)")
    broken = []
    for path in tracked_text_files():
        if path.suffix == ".md":
            continue  # markdown links are checked by test_relative_links_resolve
        try:
            text = path.read_text()
        except UnicodeDecodeError:
            continue
        for page, anchor in set(reference.findall(text)):
            target = DOCS / page
            if not target.is_file():
                broken.append(f"{path.relative_to(REPO_ROOT)}: docs/{page} does not exist")
            elif anchor not in [a for _, _, a, _ in headings(target.read_text())]:
                broken.append(f"{path.relative_to(REPO_ROOT)}: no heading #{anchor} in docs/{page}")
    assert not broken, "\n".join(broken)


# ------------------------------------------------------------------------ relative links
@pytest.mark.parametrize("path", markdown_files(), ids=lambda p: str(p.relative_to(REPO_ROOT)))
def test_relative_links_resolve(path):
    broken = []
    for target in links(path):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target, flags=re.I):  # http:, mailto: ...
            continue
        file_part, _, anchor = target.partition("#")
        dest = (path.parent / file_part).resolve() if file_part else path
        if not dest.exists():
            broken.append(f"{target}: no file {dest}")
            continue
        if anchor and dest.suffix == ".md":
            anchors = [a for _, _, a, _ in headings(dest.read_text())]
            if anchor not in anchors:
                broken.append(f"{target}: no heading #{anchor} in {dest.name}")
    assert not broken, f"broken links in {path.relative_to(REPO_ROOT)}:\n" + "\n".join(broken)


# ------------------------------------------------- the README's blocks, run on tiny data
def readme_blocks() -> dict[str, str]:
    """The bash blocks of 'Train, generate, interactive', by the heading above each."""
    text = section(README.read_text(), slug("Train, generate, interactive")) or ""
    blocks, heading, code = {}, None, None
    for line in text.splitlines():
        if code is not None:
            if FENCE.match(line):
                blocks[heading] = "\n".join(code)
                code = None
            else:
                code.append(line)
        elif line.startswith("### "):
            heading = line[4:].strip()
        elif line.strip() == "```bash":
            code = []
    return blocks


def commands(block: str) -> list[list[str]]:
    joined = re.sub(r"\\\n", " ", block)
    return [shlex.split(line) for line in joined.splitlines()
            if line.strip() and not line.lstrip().startswith("#")]


# Flags appended to the README's commands (argparse keeps the last value): tiny sizes and
# budgets, the architecture's own layer count (its pooling schedule names layers), and a cap on
# the output length (a model trained for 6 updates rarely ends a sentence by itself).
TINY_WIDTH_ARGS = [arg for pair in zip(TINY_MODEL_ARGS[::2], TINY_MODEL_ARGS[1::2])
                   if not pair[0].endswith("-layers") for arg in pair]
APPENDED = {
    "fairseq-train": [*TINY_TRAIN_ARGS, *TINY_WIDTH_ARGS],
    "fairseq-generate": ["--cpu", "--num-workers", "0", "--max-len-a", "0", "--max-len-b", "80"],
    "fairseq-interactive": ["--cpu", "--max-len-a", "0", "--max-len-b", "80"],
}
def tiny_translation_data(root: Path) -> None:
    """data/iwslt14_de_en as the IWSLT recipe leaves it: Moses, joint BPE, data-bin."""
    work = root / "data" / "iwslt14_de_en"
    raw = write_toy_parallel_corpus(work / "raw")
    tok = work / "tok"
    tok.mkdir()
    for file in raw.iterdir():
        lines = [line.replace(" ", ", ", 1) + "." for line in file.read_text().splitlines()]
        (tok / file.name).write_text("\n".join(moses_tokenize(lines, file.suffix[1:])) + "\n")
    (work / "bpe").mkdir()
    codes = learn_bpe([tok / "train.de", tok / "train.en"], work / "bpe" / "code", merges=12)
    for file in tok.iterdir():
        lines = apply_bpe(file.read_text().splitlines(), codes)
        (work / "bpe" / file.name).write_text("\n".join(lines) + "\n")
    preprocess(work / "bpe", work / "data-bin")


def tiny_summarization_data(root: Path) -> None:
    """data/arxiv as the long-document recipe leaves it: SentencePiece pieces, data-bin."""
    work = root / "data" / "arxiv"
    raw = write_toy_parallel_corpus(work / "raw")
    (work / "spm").mkdir()
    model = train_sentencepiece([raw / "train.de", raw / "train.en"], work / "spm" / "spm",
                                vocab_size=40)
    pieces = work / "pieces"
    pieces.mkdir()
    for file in raw.iterdir():
        side = {".de": "src", ".en": "tgt"}[file.suffix]
        lines = sentencepiece_encode(file.read_text().splitlines(), model)
        (pieces / f"{file.stem}.{side}").write_text("\n".join(lines) + "\n")
    preprocess(pieces, work / "data-bin", src="src", tgt="tgt")


# Each data folder the README names: how to build its tiny stand-in, and raw text a user would
# type (words the subword model splits; for Moses, punctuation glued to words).
DATASETS = {
    "data/iwslt14_de_en/": (tiny_translation_data, "w12 w3 w27, w5.\nw14 w7 w22\n"),
    "data/arxiv/": (tiny_summarization_data, "w12 w3 w27 w5\nw14 w7 w22\n"),
}


def test_readme_has_a_block_per_component():
    blocks = readme_blocks()
    assert set(blocks) >= {"ReLUFormer", "Sparse-softmax", "Transpooler and Pyramidion"}, blocks
    for heading, block in blocks.items():
        programs = [cmd[0] for cmd in commands(block)]
        assert programs == ["fairseq-train", "fairseq-generate", "fairseq-interactive"], heading
        for cmd in commands(block):
            assert cmd[cmd.index("--user-dir") + 1] == "relu_former", (heading, cmd[0])
        interactive = commands(block)[2]
        assert "--bpe" in interactive, f"{heading}: fairseq-interactive needs the data's --bpe"


@pytest.fixture(scope="module")
def tiny_data_root(tmp_path_factory) -> Path:
    """A folder whose data/ receives each tiny data set once, when a block first needs it."""
    return tmp_path_factory.mktemp("readme_data")


@pytest.mark.slow
@pytest.mark.parametrize("heading", sorted(readme_blocks()))
def test_readme_block_runs_on_tiny_data(heading, tiny_data_root, tmp_path):
    block = readme_blocks()[heading]
    used = [(prefix, build, text) for prefix, (build, text) in DATASETS.items()
            if prefix in block]
    assert len(used) == 1, f"{heading}: expected one of {list(DATASETS)} in the block"
    prefix, build, raw_input = used[0]
    if not (tiny_data_root / prefix).is_dir():
        build(tiny_data_root)
    (tmp_path / "data").symlink_to(tiny_data_root / "data")
    for cmd in commands(block):
        program = cmd[0]
        args = [fairseq_command(program),
                *[USER_DIR if prev == "--user-dir" else arg
                  for prev, arg in zip(cmd, cmd[1:])],
                *APPENDED[program]]
        if program == "fairseq-interactive":
            proc = run_command(args, cwd=tmp_path, input=raw_input)
            sources = re.findall(r"^S-\d+\t(.*)$", proc.stdout, flags=re.M)
            detok = re.findall(r"^D-\d+\t\S+\t(.*)$", proc.stdout, flags=re.M)
            assert len(sources) == len(detok) == 2, proc.stdout[-3000:]
            # the tokenizer and BPE flags turn raw text into the training vocabulary
            assert not any("<unk>" in s for s in sources), sources
            assert not any("@@" in d or "\u2581" in d for d in detok), detok
            continue
        proc = run_command(args, cwd=tmp_path)
        if program == "fairseq-train":
            save_dir = cmd[cmd.index("--save-dir") + 1]
            assert (tmp_path / save_dir / "checkpoint_best.pt").is_file(), proc.stdout[-3000:]
        else:
            assert_generation_output(proc.stdout)
