"""Top-k (sparse-softmax) decoding for ``fairseq-generate``, for any architecture.

At every decoding step the k largest log-probabilities of each hypothesis are kept and
renormalised, log p_i - logsumexp_{j in Omega_k} log p_j (= z_i - logsumexp over the top-k
logits), and every other token gets -inf. Beam search, sampling and fairseq's other searches
then score with that distribution; the paper keeps the top 5 when decoding with beam 5.

How it fits fairseq: ``fairseq-generate`` (and ``-interactive``, and the ``--eval-bleu``
validation of ``translation``) get their generator from ``task.build_generator``. The
``SparseDecodingTaskMixin`` below wraps the search strategy of that generator, so it sees the
log-probabilities *after* fairseq's own per-step rules (no pad, ``--unk-penalty``,
``--min-len``, forced end of sentence at the maximum length, ``--no-repeat-ngram-size``,
prefix tokens, ``--lm-path`` fusion): the top k are taken among the tokens that are still
allowed. Greedy decoding (beam 1, no sampling) is unchanged, since renormalising does not move
the argmax; only the scores differ.

Turning it on:

- translation-like data: ``fairseq-generate DATA --user-dir relu_former --task
  translation_sparse_decoding --sparse-softmax-k 5 --beam 5 --path ckpt.pt``; models trained
  with ``--task translation`` load as they are (the task adds one flag to ``translation``).
- any other task: ``class MyTask(SparseDecodingTaskMixin, SomeTask)`` with a config that also
  inherits ``SparseDecodingConfig``, or call ``use_sparse_decoding(generator, k)`` on a
  generator you built yourself.
"""

import logging
from dataclasses import dataclass, field

from fairseq import search
from fairseq.dataclass import FairseqDataclass
from fairseq.tasks import register_task
from fairseq.tasks.translation import TranslationConfig, TranslationTask

from relu_former.errors import OptionError
from relu_former.sparse_softmax.k_flag import check_k_in_range
from relu_former.sparse_softmax.sparse_softmax import sparse_log_softmax

logger = logging.getLogger(__name__)


def check_sparse_softmax_k(k: object, vocab_size: int) -> None:
    """Raise an OptionError naming ``--sparse-softmax-k`` when it is not in [0, vocab_size]."""
    check_k_in_range(
        k, 0, vocab_size, "target vocabulary",
        meaning="0 = ordinary softmax decoding, k >= 1 = keep the k most likely tokens per step",
        at_limit="0 turns top-k decoding off")


class TopKRenormalizedSearch(search.Search):
    """A fairseq search strategy that first turns each step's log-probs into sparse-softmax.

    Wraps any other strategy (beam search, sampling, diverse beam, constrained ...): ``step``
    renormalises the top k of ``lprobs`` (bsz x beam x V) and hands them to the wrapped
    strategy; everything else is delegated to it.
    """

    def __init__(self, inner: search.Search, k: int, tgt_dict):
        super().__init__(tgt_dict)
        self.inner = inner
        self.k = k
        self.supports_constraints = inner.supports_constraints
        self.stop_on_max_len = inner.stop_on_max_len
        self.needs_src_lengths = getattr(inner, "needs_src_lengths", False)

    def step(self, step, lprobs, scores, *args, **kwargs):
        return self.inner.step(step, sparse_log_softmax(lprobs, self.k), scores, *args, **kwargs)

    def set_src_lengths(self, src_lengths):
        self.inner.set_src_lengths(src_lengths)

    def init_constraints(self, batch_constraints, beam_size: int):
        self.inner.init_constraints(batch_constraints, beam_size)

    def prune_sentences(self, batch_idxs):
        self.inner.prune_sentences(batch_idxs)

    def update_constraints(self, active_hypos):
        self.inner.update_constraints(active_hypos)


def use_sparse_decoding(generator, k: int):
    """Make ``generator`` (a fairseq ``SequenceGenerator``) decode with sparse-softmax top-k.

    k = 0 returns the generator unchanged. Raises an OptionError for generators without a search
    strategy (``--score-reference`` scores references with the model's full softmax).
    """
    if k == 0:
        return generator
    searcher = getattr(generator, "search", None)
    if not isinstance(searcher, search.Search):
        raise OptionError(
            "--sparse-softmax-k",
            f"--sparse-softmax-k works with fairseq's SequenceGenerator (beam search, "
            f"sampling); {type(generator).__name__} has no search strategy to wrap "
            "(e.g. --score-reference): drop --sparse-softmax-k"
        )
    if isinstance(searcher, TopKRenormalizedSearch):
        searcher = searcher.inner
    beam = getattr(generator, "beam_size", 1)
    if k == 1 and beam > 1 and not isinstance(searcher, search.Sampling):
        # Top-1 leaves one finite continuation per step, so beam search has a single finite
        # hypothesis: the greedy one. The other beam slots would hold -inf hypotheses that can
        # never finish (fairseq only finalises finite ones) and the search would run past
        # --max-len. Beam 1 finds the same hypothesis, with the same scores.
        logger.warning("--sparse-softmax-k 1 keeps one token per step: decoding with beam 1 "
                       "(the only hypothesis with a finite score) instead of --beam %d", beam)
        generator.beam_size = 1
    elif k < beam:
        logger.warning(
            "--sparse-softmax-k %d is smaller than --beam %d: at the first step only %d "
            "hypotheses have a finite score (the paper uses k = beam)", k, beam, k,
        )
    generator.search = TopKRenormalizedSearch(searcher, k, generator.tgt_dict)
    return generator


@dataclass
class SparseDecodingConfig(FairseqDataclass):
    """The flag of top-k decoding; inherit it into a task config with the mixin below."""

    sparse_softmax_k: int = field(
        default=0,
        metadata={"help": "decode with sparse-softmax, an integer from 0 to the target "
                  "vocabulary size: at every step keep the k most likely tokens, renormalise "
                  "them and give the others -inf (beam search and sampling alike); 0 = "
                  "ordinary softmax (the paper keeps 5 with --beam 5). Training with "
                  "--criterion sparse_softmax_*, the one flag is the loss's k too (default "
                  "then 20)"},
    )


class SparseDecodingTaskMixin:
    """Adds top-k decoding to a fairseq task: put it before the task class in the bases."""

    def __init__(self, cfg, *args, **kwargs):
        super().__init__(cfg, *args, **kwargs)
        check_sparse_softmax_k(cfg.sparse_softmax_k, len(self.target_dictionary))

    def build_generator(self, models, args, seq_gen_cls=None, extra_gen_cls_kwargs=None,
                        **kwargs):
        generator = super().build_generator(
            models, args, seq_gen_cls=seq_gen_cls, extra_gen_cls_kwargs=extra_gen_cls_kwargs,
            **kwargs,
        )
        return use_sparse_decoding(generator, self.cfg.sparse_softmax_k)


@dataclass
class TranslationSparseDecodingConfig(TranslationConfig, SparseDecodingConfig):
    pass


@register_task("translation_sparse_decoding", dataclass=TranslationSparseDecodingConfig)
class TranslationSparseDecodingTask(SparseDecodingTaskMixin, TranslationTask):
    """fairseq's ``translation`` task with ``--sparse-softmax-k`` top-k decoding."""
