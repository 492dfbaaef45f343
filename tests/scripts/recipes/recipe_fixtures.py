"""Tiny corpora in the real published formats, for the recipe tests.

Each builder writes what a user would download (same archive type, folder layout, file names
and markup) with a few hundred generated sentences of a word-for-word German-English "language"
so that a shrunk model has something learnable and every script path is exercised.
"""

from __future__ import annotations

import json
import random
import re
import tarfile
import zipfile
from pathlib import Path

# German word -> English word; sentences are built from these in the same order.
LEXICON = {
    "der": "the", "die": "the", "ein": "a", "hund": "dog", "katze": "cat", "mann": "man",
    "frau": "woman", "kind": "child", "sieht": "sees", "mag": "likes", "hat": "has",
    "haus": "house", "baum": "tree", "ball": "ball", "buch": "book", "rot": "red",
    "gross": "big", "klein": "small", "alt": "old", "neu": "new", "heute": "today",
    "morgen": "tomorrow", "hier": "here", "dort": "there", "und": "and", "nicht": "not",
    "schnell": "fast", "gern": "gladly", "wasser": "water", "brot": "bread",
}
_GERMAN = sorted(LEXICON)


def parallel_sentences(count: int, seed: int, min_words: int = 3, max_words: int = 9
                       ) -> list[tuple[str, str]]:
    """``count`` (German, English) pairs, capitalised, with punctuation Moses must split."""
    rng = random.Random(seed)
    pairs = []
    for _ in range(count):
        words = [rng.choice(_GERMAN) for _ in range(rng.randint(min_words, max_words))]
        end = rng.choice([".", "?", "!", ", ja."])
        de = " ".join(words).capitalize()
        en = " ".join(LEXICON[w] for w in words).capitalize()
        end_en = ", yes." if end == ", ja." else end
        pairs.append((de + end, en + end_en))
    return pairs


def _tar(archive: Path, root: Path, members: list[str]) -> Path:
    with tarfile.open(archive, "w:gz") as tar:
        for member in members:
            tar.add(root / member, arcname=member)
    return archive


def _xml_set(pairs: list[tuple[str, str]], side: int, name: str) -> str:
    segs = "\n".join(f'<seg id="{i}"> {p[side]} </seg>' for i, p in enumerate(pairs, 1))
    return (f'<?xml version="1.0" encoding="UTF-8"?>\n<mteval>\n<srcset setid="{name}" '
            f'srclang="german">\n<doc docid="1" genre="lectures">\n<url>http://www.ted.com/'
            f'talks/x.html</url>\n<talkid>1</talkid>\n{segs}\n</doc>\n</srcset>\n</mteval>\n')


def build_iwslt14(folder: Path, n_train: int = 300) -> Path:
    """WIT3's ``de-en.tgz``: train.tags files with TED metadata lines, XML dev/test sets."""
    root = folder / "iwslt_src"
    (root / "de-en").mkdir(parents=True)
    pairs = parallel_sentences(n_train, seed=1)
    header = ["<url>http://www.ted.com/talks/a.html</url>", "<keywords>talks</keywords>",
              "<speaker>A Speaker</speaker>", "<talkid>1</talkid>"]
    for side, lang in enumerate(("de", "en")):
        lines = header + [f"<title>{pairs[0][side]}</title>",
                          f"<description>{pairs[1][side]}</description>"]
        lines += [p[side] for p in pairs[2:]]
        (root / "de-en" / f"train.tags.de-en.{lang}").write_text("\n".join(lines) + "\n")
    sets = ["IWSLT14.TED.dev2010", "IWSLT14.TEDX.dev2012", "IWSLT14.TED.tst2010",
            "IWSLT14.TED.tst2011", "IWSLT14.TED.tst2012"]
    for k, name in enumerate(sets):
        test = parallel_sentences(4, seed=100 + k)
        for side, lang in enumerate(("de", "en")):
            (root / "de-en" / f"{name}.de-en.{lang}.xml").write_text(_xml_set(test, side, name))
    return _tar(folder / "de-en.tgz", root, ["de-en"])


def build_wmt14(folder: Path, n_per_corpus: int = 120) -> Path:
    """A folder holding WMT14's training-parallel-*.tgz, dev.tgz (newstest2013) and
    test-full.tgz (newstest2014)."""
    root, out = folder / "wmt_src", folder / "wmt14"
    out.mkdir(parents=True)
    corpora = {
        "training-parallel-europarl-v7.tgz": "training/europarl-v7.de-en",
        "training-parallel-commoncrawl.tgz": "commoncrawl.de-en",
        "training-parallel-nc-v9.tgz": "training/news-commentary-v9.de-en",
    }
    for k, (archive, prefix) in enumerate(corpora.items()):
        pairs = parallel_sentences(n_per_corpus, seed=10 + k)
        (root / prefix).parent.mkdir(parents=True, exist_ok=True)
        (root / f"{prefix}.de").write_text("\n".join(p[0] for p in pairs) + "\n")
        (root / f"{prefix}.en").write_text("\n".join(p[1] for p in pairs) + "\n")
        _tar(out / archive, root, [f"{prefix}.de", f"{prefix}.en"])
    dev = parallel_sentences(8, seed=21)
    (root / "dev").mkdir()
    for side, lang in enumerate(("de", "en")):
        (root / "dev" / f"newstest2013.{lang}").write_text("\n".join(p[side] for p in dev) + "\n")
    _tar(out / "dev.tgz", root, ["dev"])
    test = parallel_sentences(12, seed=20)
    (root / "test-full").mkdir()
    for side, (lang, kind) in enumerate((("de", "ref"), ("en", "src"))):
        segs = "\n".join(f'<seg id="{i}">{p[side]}</seg>' for i, p in enumerate(test, 1))
        (root / "test-full" / f"newstest2014-deen-{kind}.{lang}.sgm").write_text(
            f'<{kind}set setid="newstest2014" srclang="any" trglang="{lang}">\n<doc sysid="'
            f'{kind}" docid="1" genre="news" origlang="en">\n{segs}\n</doc>\n</{kind}set>\n')
    _tar(out / "test-full.tgz", root, ["test-full"])
    return out


MARKER = re.compile(r"\bq\d{5}\b")


def marked_pairs(count: int, seed: int, first: int) -> list[tuple[str, str]]:
    """Sentence pairs each carrying the same marker token ``qNNNNN`` (numbered from ``first``)
    on both sides, so that which sentences a segment holds can be read off either side."""
    pairs = []
    for k, (de, en) in enumerate(parallel_sentences(count, seed), first):
        marker = f"q{k:05d}"
        de_first, de_rest = de.split(" ", 1)
        en_first, en_rest = en.split(" ", 1)
        pairs.append((f"{de_first} {marker} {de_rest}", f"{en_first} {marker} {en_rest}"))
    return pairs


def build_europarl(folder: Path, n_sessions: int = 6, chapters: int = 3) -> Path:
    """Europarl v7 source release ``europarl.tgz``: txt/{de,en}/ep-YY-MM-DD.txt sessions in the
    raw format: one paragraph a line (several sentences each, some paragraphs longer than the
    shortest segment length), ``<CHAPTER>``, ``<SPEAKER>``, ``<P>``, ``<BRK>``, closing tags,
    empty lines, and a German-only paragraph. Every sentence pair carries a marker token."""
    root = folder / "europarl_src"
    rng = random.Random(3)
    for lang in ("de", "en"):
        (root / "txt" / lang).mkdir(parents=True)
    counter = 0

    def paragraph(size: int) -> tuple[str, str]:
        nonlocal counter
        pairs = marked_pairs(size, seed=counter, first=counter)
        counter += size
        return " ".join(p[0] for p in pairs), " ".join(p[1] for p in pairs)

    for s in range(n_sessions):
        name = f"ep-00-01-{s + 10:02d}.txt"
        texts: dict[str, list[str]] = {"de": [], "en": []}

        def add(de: str, en: str, texts: dict = texts) -> None:
            texts["de"].append(de)
            texts["en"].append(en)

        for c in range(1, chapters + 1):
            add(f"<CHAPTER ID={c}>", f"<CHAPTER ID={c}>")
            add(*paragraph(1))  # the title
            for speaker in range(1, 3):
                tag = f'<SPEAKER ID={speaker} NAME="Speaker {speaker}" LANGUAGE="EN">'
                add(tag, tag)
                add(*paragraph(rng.randint(2, 4)))
                add("<BRK>", "<BRK>")
                add(*paragraph(rng.choice([1, 12])))  # 12 sentences: over 100 BPE tokens
                add("", "")
                add("<P>", "<P>")
                add(*paragraph(rng.randint(1, 5)))
                if speaker == 2 and c == 1:
                    texts["de"].append("(Beifall)")  # a paragraph in one language only
                add(*paragraph(rng.randint(2, 3)))
                add("</SPEAKER>", "</SPEAKER>")
        for lang, lines in texts.items():
            (root / "txt" / lang / name).write_text("\n".join(lines) + "\n")
    # a session only in German: the aligner must skip it
    (root / "txt" / "de" / "ep-00-02-01.txt").write_text("<CHAPTER ID=1>\nNur hier.\n")
    return _tar(folder / "europarl.tgz", root, ["txt"])


def build_europarl_concatenated(folder: Path, documents: tuple[int, int, int] = (12, 2, 2)
                                ) -> Path:
    """The document-level split ``concatenated_en2de_{train,dev,test}_{en,de}.txt`` (one
    sentence a line, ``<d>`` before each document) in a .tgz, sentences marked."""
    root = folder / "europarl_doc_src" / "europarl"
    root.mkdir(parents=True)
    counter = 0
    for split, count in zip(("train", "dev", "test"), documents):
        lines: dict[str, list[str]] = {"de": [], "en": []}
        for d in range(count):
            pairs = marked_pairs(3 + d % 5, seed=counter, first=counter)
            counter += len(pairs)
            for side, lang in enumerate(("de", "en")):
                lines[lang] += ["<d>"] + [p[side] for p in pairs]
        for lang, text in lines.items():
            (root / f"concatenated_en2de_{split}_{lang}.txt").write_text("\n".join(text) + "\n")
    return _tar(folder / "europarl-doc.tgz", root.parent, ["europarl"])


def build_cohan(folder: Path, name: str, sizes: tuple[int, int, int] = (60, 6, 6)) -> Path:
    """Cohan et al.'s ``<name>-dataset.zip``: {train,val,test}.txt, one JSON document a line."""
    root = folder / f"{name}_src" / f"{name}-dataset"
    root.mkdir(parents=True)
    rng = random.Random(len(name))
    for s, (split, size) in enumerate(zip(("train", "val", "test"), sizes)):
        lines = []
        for k in range(size):
            article = [en for _, en in parallel_sentences(rng.randint(8, 14),
                                                          seed=len(name) * 10**5 + s * 1000 + k)]
            abstract = [f"<S> {s.lower()} </S>" for s in article[:2]]
            lines.append(json.dumps({
                "article_id": f"{split}-{k}", "article_text": article,
                "abstract_text": abstract, "labels": None,
                "section_names": ["introduction"], "sections": [article],
            }))
        (root / f"{split}.txt").write_text("\n".join(lines) + "\n")
    archive = folder / f"{name}-dataset.zip"
    with zipfile.ZipFile(archive, "w") as z:
        for split in ("train", "val", "test"):
            z.write(root / f"{split}.txt", f"{name}-dataset/{split}.txt")
    return archive


def build_gigaword(folder: Path, sizes: tuple[int, int, int] = (150, 20, 10),
                   published_10k: int = 0) -> Path:
    """UniLM's Gigaword archive layout: ``org_data/`` (Rush et al.'s lower-cased, tokenised
    text); with ``published_10k`` also the 10k subset beside it under UniLM's names,
    ``train.src.10k`` and ``train.tgt.10k``, of that many pairs, in WordPiece form (``##``
    continuations)."""
    root = folder / "gigaword_src" / "org_data"
    root.mkdir(parents=True)
    if published_10k:
        pairs = parallel_sentences(published_10k, seed=40, min_words=8, max_words=14)
        src = [en.lower().replace("man", "m ##an") for _, en in pairs]
        (root.parent / "train.src.10k").write_text("\n".join(src) + "\n")
        (root.parent / "train.tgt.10k").write_text(
            "\n".join(" ".join(s.split()[:4]) for s in src) + "\n")
    for k, (split, size) in enumerate(zip(("train", "dev", "test"), sizes)):
        pairs = parallel_sentences(size, seed=30 + k, min_words=8, max_words=14)
        src = [en.lower().replace(".", " .").replace("?", " ?").replace("!", " !")
               for _, en in pairs]
        tgt = [" ".join(s.split()[:4]) for s in src]  # the "headline": the first words
        (root / f"{split}.src.txt").write_text("\n".join(src) + "\n")
        (root / f"{split}.tgt.txt").write_text("\n".join(tgt) + "\n")
    members = ["org_data"] + (["train.src.10k", "train.tgt.10k"] if published_10k else [])
    return _tar(folder / "gigaword.tgz", root.parent, members)


LONG_ANSWER = "zebracorn"  # the answer of the fixture's one long paragraph
LONG_ANSWER_AT = 520  # its token position: past the paper's 464-token input


def long_squad_paragraph() -> dict:
    """A SQuAD paragraph of 600 tokens whose answer is token LONG_ANSWER_AT."""
    words = [f"filler{i % 50}" for i in range(600)]
    words[LONG_ANSWER_AT] = LONG_ANSWER
    context = " ".join(words)
    return {"context": context, "qas": [{
        "id": "long", "question": "Which animal has one horn ?",
        "answers": [{"text": LONG_ANSWER, "answer_start": context.index(LONG_ANSWER)}]}]}


def build_squad(folder: Path, articles: tuple[int, int] = (6, 4)) -> Path:
    """A folder with SQuAD 1.1's ``train-v1.1.json`` and ``dev-v1.1.json``; some answers are
    asked about twice (two questions of one input); the first training article also holds a
    600-token paragraph whose answer lies past token 464 (``long_squad_paragraph``)."""
    out = folder / "squad"
    out.mkdir(parents=True)
    for k, (name, n_articles) in enumerate(zip(("train-v1.1.json", "dev-v1.1.json"), articles)):
        data = []
        for a in range(n_articles):
            paragraphs = []
            for p in range(3):
                sentences = [en for _, en in parallel_sentences(4, seed=k * 1000 + a * 10 + p)]
                context = " ".join(sentences)
                qas = []
                for q, sentence in enumerate(sentences[:3]):
                    answer = sentence.split()[1].strip(".?!,")
                    qas.append({"id": f"{k}{a}{p}{q}", "question": f"What {sentence.lower()}",
                                "answers": [{"text": answer,
                                             "answer_start": context.index(answer)}]})
                    if q == 0:  # a second question about the same answer: the same input
                        qas.append({"id": f"{k}{a}{p}{q}b", "question": f"Who {sentence.lower()}",
                                    "answers": [{"text": answer,
                                                 "answer_start": context.index(answer)}]})
                paragraphs.append({"context": context, "qas": qas})
            if k == 0 and a == 0:
                paragraphs.append(long_squad_paragraph())
            data.append({"title": f"Article_{k}_{a}", "paragraphs": paragraphs})
        (out / name).write_text(json.dumps({"version": "1.1", "data": data}))
    return out
