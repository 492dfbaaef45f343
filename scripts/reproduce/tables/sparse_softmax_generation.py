"""Sparse-softmax's generation fine-tuning: a trained model continued with label-smoothed
cross-entropy or with sparse-softmax, decoded with beam 1 and beam 5."""

from __future__ import annotations

import scripts.reproduce.tables.toy_settings as toy
from scripts.reproduce.spec import Comparison, Deviation, Metric, Row, TableSpec

SOFTMAX = ("--attention-activation", "softmax")
SPARSE = ("--criterion", "sparse_softmax_cross_entropy", "--sparse-softmax-k", "20")
DECODE = ("--task", "translation_sparse_decoding", "--sparse-softmax-k", "5")
PAPER_GAIN = {"bleu_beam1": "+0.67 R-1 / +0.79 R-2", "bleu_beam5": "+0.28 R-1 / +0.55 R-2"}
ROWS = (
    Row("pretrained", "softmax Transformer (the starting point)", SOFTMAX, hidden=True,
        recipe_model="transformer"),
    # both continue the same pretrained model, each with its own criterion
    Row("finetune_ce", "+ label-smoothed cross-entropy", SOFTMAX, parent="pretrained",
        paper=dict.fromkeys(PAPER_GAIN, "baseline"), recipe_model="transformer"),
    Row("finetune_sparse", "+ sparse-softmax (k 20, top-5 decoding)", (*SOFTMAX, *SPARSE),
        parent="pretrained", generate_flags=DECODE, paper=PAPER_GAIN,
        recipe_model="sparse_softmax"),
)

SPEC = TableSpec(
    name="sparse_softmax_generation",
    title="fine-tuning with sparse-softmax, beam 1 and beam 5",
    paper="Sparse-softmax, generation tables (Gigaword-10k, SQuAD question generation)",
    claim="Fine-tuning with sparse-softmax beats label-smoothed cross-entropy, more at beam 1 "
          "(+0.67 ROUGE-1 on Gigaword-10k) than at beam 5 (+0.28).",
    kind="translation",
    metrics=(Metric("bleu_beam1", "BLEU beam 1"), Metric("bleu_beam5", "BLEU beam 5"),
             toy.VALID_NLL),
    rows=ROWS,
    comparisons=(
        Comparison("finetune_sparse", "finetune_ce", "bleu_beam1",
                   "sparse-softmax fine-tuning wins at beam 1"),
        Comparison("finetune_sparse", "finetune_ce", "bleu_beam5",
                   "sparse-softmax fine-tuning wins at beam 5"),
    ),
    toy={**toy.GENERATION_TOY, "beams": [1, 5]},
    tiny={**toy.TRANSLATION_TINY, "beams": [1, 2]},
    paper_settings={"recipe": "gigaword_10k", "beams": [1, 5]},
    deviations=(
        Deviation("task", "Gigaword-10k headlines, SQuAD question generation (UNILM)",
                  "gettext fr->en translation (a Transformer trained here)",
                  "offline; the table's question (does the criterion help at decoding) "
                  "carries over"),
        Deviation("metric", "ROUGE / BLEU-4", "tokenised BLEU", "translation"),
    ),
    notes="Paper scale: `scripts/recipes/gigaword_10k/train.sh transformer` for the starting "
          "point, then each row `train.sh MODEL -- --finetune-from-model ...` and "
          "`evaluate.sh MODEL -- --beam B` (its score in ROUGE; the collector reads "
          "`bleu4_tokenized` from BLEU recipes only).",
)
