"""The translation corpus of the demo and the ablations: the generated fallback, its rule, BPE."""

from __future__ import annotations

import argparse
from types import SimpleNamespace

from scripts.common.translation_data import make_corpus, prepare


def test_without_catalogs_it_says_so_and_prepares_the_generated_task(tmp_path, capsys):
    args = argparse.Namespace(locale_dir=tmp_path / "empty", lang="de")
    scale = SimpleNamespace(max_train=400, max_test=40, heldout_per_mille=80,
                            generated_train=400)
    raw, prep = tmp_path / "raw", tmp_path / "prep"
    origin = make_corpus(args, scale, raw)
    said = capsys.readouterr().out
    assert "No usable gettext catalogs" in said and str(tmp_path / "empty") in said
    assert "GENERATED task" in said
    assert origin.startswith("generated task")
    sources = (raw / "train.de").read_text().splitlines()
    targets = (raw / "train.en").read_text().splitlines()
    assert len(sources) == scale.generated_train
    # the rule: a fixed lexicon, and the last word moved to second place
    lexicon = {}
    for source, target in zip(sources, targets):
        words, out = source.split(), target.split()
        reordered = [out[0]] + out[2:] + [out[1]]
        for s, t in zip(words, reordered):
            assert lexicon.setdefault(s, t) == t
    prepare(raw, prep, 150)
    for split in ("train", "valid", "test"):
        assert (prep / "sentences" / f"{split}.de").read_text().strip()
