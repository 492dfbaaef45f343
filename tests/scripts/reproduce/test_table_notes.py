"""A table's notes come from ``tables/notes/NAME.md``: wrapped paragraphs become one line each,
a paragraph that is an HTML comment (why it is kept) is left out, and ``{parity_margin}`` is
the shared paragraph on a parity claim's margin."""

from __future__ import annotations

from scripts.reproduce.tables import TABLES
from scripts.reproduce.tables.toy_settings import NOTES, table_notes


def test_every_table_has_its_notes_file_and_nothing_else_is_there():
    assert {path.stem for path in NOTES.glob("*.md")} == {*TABLES, "parity_margin"}


def test_notes_render_as_single_line_paragraphs_without_comments_or_placeholders():
    parity = " ".join((NOTES / "parity_margin.md").read_text().split())
    for name, spec in TABLES.items():
        assert spec.notes == table_notes(name)
        paragraphs = spec.notes.split("\n\n")
        assert all(p and "\n" not in p and p == p.strip() for p in paragraphs), name
        assert "<!--" not in spec.notes and "{parity_margin}" not in spec.notes, name
        source = (NOTES / f"{name}.md").read_text()
        assert (parity in paragraphs) == ("{parity_margin}" in source), name
    # the tables with a parity claim on BLEU say why its margin is 1 BLEU
    assert parity in TABLES["relu_former_table4"].notes.split("\n\n")


def test_a_comment_paragraph_is_left_out_and_wrapping_is_undone(tmp_path, monkeypatch):
    import scripts.reproduce.tables.toy_settings as toy

    (tmp_path / "parity_margin.md").write_text("Why one\nBLEU.\n")
    (tmp_path / "t.md").write_text("<!-- kept because\n     of this -->\n\nFirst line\nwrapped.\n\n"
                                   "{parity_margin}\n\nLast.\n")
    monkeypatch.setattr(toy, "NOTES", tmp_path)
    assert toy.table_notes("t") == "First line wrapped.\n\nWhy one BLEU.\n\nLast."
