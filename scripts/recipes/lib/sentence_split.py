"""Moses sentence splitting (``split-sentences.perl``), the splitter Europarl's tools ship.

Europarl v7's raw release holds one paragraph a line; its own ``sentence-align-corpus.perl``
runs ``split-sentences.perl`` on each paragraph before Gale-Church alignment (Koehn, "Europarl:
A Parallel Corpus for Statistical Machine Translation", MT Summit 2005, section 2). The
summarization scores use the same splitter for ROUGE-Lsum, which compares summaries sentence
by sentence.

The rules, as the Perl script applies them to one paragraph:

1. ``?`` or ``!`` (or ``...``), optionally followed by closing quotes or brackets, then spaces
   and a word that starts (after opening quotes/brackets) with an upper-case letter: a break.
2. A word ending in ``.`` breaks before the next word when the next word starts (after opening
   quotes/brackets) with an upper-case letter or a digit, unless the part before the period is
   a non-breaking prefix of the language (``Mr.``, ``z.B.``; sacremoses ships Moses' lists),
   or an acronym such as ``U.S.A.``; a numeric-only prefix (``No.``, ``Art.``) does not break
   before a number.

``cased=False`` is for lower-cased text (arXiv/PubMed summaries): a lower-case letter then
also starts a sentence, and prefixes are compared lower-cased. This is our extension; the
Perl script has no such mode.
"""

from __future__ import annotations

from functools import lru_cache

import regex

_OPEN = r"['\"\(\[¿¡\p{Pi}]"
_CLOSE = r"['\"\)\]\p{Pf}]"
_QUESTION_BREAK = regex.compile(rf"([?!]) +({_OPEN}*\p{{Lu}})")
_ELLIPSIS_BREAK = regex.compile(rf"(\.\.+) +({_OPEN}*\p{{Lu}})")
_QUOTED_BREAK = regex.compile(rf"([?!\.] *{_CLOSE}+) +({_OPEN}* *\p{{Lu}})")
_PERIOD_WORD = regex.compile(r"([\w\.\-]*)(['\"\)\]%\p{Pf}]*)(\.+)$")
_ACRONYM = regex.compile(r"(\.)[\p{Lu}\-]+(\.+)$")
_STARTS_SENTENCE = regex.compile(rf"^( *{_OPEN}* *[\p{{Lu}}0-9])")
_STARTS_UNCASED = regex.compile(rf"^( *{_OPEN}* *[\p{{L}}0-9])")
_UNCASED = {pattern: regex.compile(pattern.pattern.replace(r"\p{Lu}", r"\p{L}"))
            for pattern in (_QUESTION_BREAK, _ELLIPSIS_BREAK, _QUOTED_BREAK)}


@lru_cache(maxsize=None)
def _prefixes(lang: str, cased: bool) -> tuple[frozenset[str], frozenset[str]]:
    """Moses' non-breaking prefixes of ``lang``: (always, before numbers only)."""
    from sacremoses import MosesTokenizer

    tokenizer = MosesTokenizer(lang=lang)
    always, numeric = tokenizer.NONBREAKING_PREFIXES, tokenizer.NUMERIC_ONLY_PREFIXES
    # sacremoses keeps the "#NUMERIC_ONLY#" marker on some entries of the first list
    numeric = [*numeric, *(p.split()[0] for p in always if "#NUMERIC_ONLY#" in p)]
    always = [p for p in always if "#" not in p]
    if not cased:
        always, numeric = [p.lower() for p in always], [p.lower() for p in numeric]
    return frozenset(always), frozenset(numeric)


def split_sentences(paragraph: str, lang: str = "en", *, cased: bool = True) -> list[str]:
    """The sentences of one paragraph of running text (whitespace normalised)."""
    text = " ".join(paragraph.split())
    if not text:
        return []
    for pattern in (_QUESTION_BREAK, _ELLIPSIS_BREAK, _QUOTED_BREAK):
        text = (pattern if cased else _UNCASED[pattern]).sub(r"\1\n\2", text)
    always, numeric_only = _prefixes(lang, cased)
    starts = _STARTS_SENTENCE if cased else _STARTS_UNCASED
    words = text.split(" ")
    for i in range(len(words) - 1):
        match = _PERIOD_WORD.search(words[i])
        if not match:
            continue
        prefix, closing = match.group(1), match.group(2)
        if not cased:
            prefix = prefix.lower()
        if prefix and not closing and prefix in always:
            continue
        if cased and _ACRONYM.search(words[i]):
            continue
        if not starts.match(words[i + 1]):
            continue
        if prefix and not closing and prefix in numeric_only and words[i + 1][:1].isdigit():
            continue
        words[i] += "\n"
    return [s.strip() for s in " ".join(words).split("\n") if s.strip()]
