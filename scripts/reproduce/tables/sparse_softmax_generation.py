"""Sparse-softmax's generation fine-tuning: a trained model continued with label-smoothed
cross-entropy or with sparse-softmax, decoded with beam 1 and beam 5.

At toy and tiny scale both rows continue Table 4's Transformer of their seed
(``parent="relu_former_table4:transformer"``), at the constant rate its schedule had reached,
until their own criterion's valid loss stops improving (``validation_loss="loss"``: sparse-
softmax does not train the full softmax's nll). At paper scale they fine-tune this table's
hidden row ``pretrained``, the gigaword_10k recipe's Transformer (:data:`PAPER_START`).
"""

from __future__ import annotations

import scripts.reproduce.tables.relu_former_table4 as relu_former_table4
import scripts.reproduce.tables.toy_settings as toy
from scripts.reproduce.spec import Comparison, Deviation, Metric, Row, TableSpec

START = relu_former_table4.SPEC  # whose Transformer both rows fine-tune at toy and tiny scale
SOFTMAX = START.row("transformer").flags  # the model it is: softmax attention
SPARSE = ("--criterion", "sparse_softmax_cross_entropy", "--sparse-softmax-k", "20")
DECODE = ("--task", "translation_sparse_decoding", "--sparse-softmax-k", "5")
PAPER_GAIN = {"bleu_beam1": "+0.67 R-1 / +0.79 R-2", "bleu_beam5": "+0.28 R-1 / +0.55 R-2"}
ROWS = (
    # the paper scale's starting point (PAPER_START): the recipe's softmax Transformer
    Row("pretrained", "softmax Transformer (the starting point at paper scale)", SOFTMAX,
        hidden=True, recipe_model="transformer"),
    # both continue the same trained model, each with its own criterion
    Row("finetune_ce", "+ label-smoothed cross-entropy", SOFTMAX,
        parent=f"{START.name}:transformer", paper=dict.fromkeys(PAPER_GAIN, "baseline"),
        recipe_model="transformer"),
    Row("finetune_sparse", "+ sparse-softmax (k 20, top-5 decoding)", (*SOFTMAX, *SPARSE),
        parent=f"{START.name}:transformer", generate_flags=DECODE, paper=PAPER_GAIN,
        recipe_model="sparse_softmax"),
)
# at paper scale both rows fine-tune the recipe's Transformer, not Table 4's (IWSLT14's there)
PAPER_START = {row.key: "pretrained" for row in ROWS if not row.hidden}
# The fine-tuning trains like Table 6's document stage, to at most 30 epochs (about one more
# Table 4 training, 30 CPU-minutes): at 10 the cross-entropy row, seed 1, was still improving
# at the low constant rate it continues at. The time cap only guards against a hang.
FINETUNE_PLATEAU = {"max_update": None, "validations_per_epoch": 2, "patience": 4,
                    "max_epoch": 30, "time_cap_s": 6 * 3600.0}
# the tests': on the fixture catalogs both rows reach a plateau under the cap (160 updates)
FINETUNE_PLATEAU_TINY = {"max_update": None, "patience": 2, "max_epoch": 40}

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
    toy={**toy.without_finetune_update(toy.TRANSLATION_TOY), **FINETUNE_PLATEAU,
         "beams": [1, 5]},
    tiny={**toy.without_finetune_update(toy.TRANSLATION_TINY), **FINETUNE_PLATEAU_TINY,
          "beams": [1, 2]},
    paper_settings={"recipe": "gigaword_10k", "beams": [1, 5], "parents": PAPER_START},
    # each row stops on (and keeps the checkpoint of) its own criterion's valid loss
    validation_loss="loss",
    deviations=(
        Deviation("task", "Gigaword-10k headlines, SQuAD question generation (UNILM)",
                  "gettext fr->en translation", "offline; the table's question (does the "
                  "criterion help at decoding) carries over"),
        Deviation("metric", "ROUGE / BLEU-4", "tokenised BLEU", "translation"),
        Deviation("start", "a pretrained UNILM (`--scale paper` here: the gigaword_10k "
                  "recipe's softmax Transformer, trained first)", "Table 4's Transformer of "
                  "the same seed (2+2 layers of width 64, at the rate Table 4 chose, trained "
                  "to its plateau on the same sentence pairs)", "no pretrained model offline; "
                  "a model that has finished learning on these pairs, so the criterion, not "
                  "more training, makes the difference; Table 4's models are that start, so "
                  "none is trained twice"),
        Deviation("budget", "fine-tuning UNILM (`--scale paper` here: the gigaword_10k "
                  "recipe's 20,000 updates of 4,096 tokens, lr 5e-4)", "batches of 2,048 "
                  "tokens at the constant rate Table 4's schedule had reached at the start; "
                  "validation every half epoch; until the row's own criterion's valid loss "
                  f"has not improved for {toy.patience_epochs(FINETUNE_PLATEAU)} epochs (at "
                  f"most {FINETUNE_PLATEAU['max_epoch']}); the best validated model decoded",
                  "CPU budget: each row trained until its own loss stops improving"),
    ),
    notes=toy.table_notes("sparse_softmax_generation"),
)
