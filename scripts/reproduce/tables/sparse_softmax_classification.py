"""Sparse-softmax's classification sweep (its Figure 2 and classification tables): softmax
cross-entropy against sparse-softmax over the k largest class logits, micro-F1 against k,
through ``scripts/analysis/classification.py``'s corpus, model and criteria; each row trained to
a plateau at its own rate (``toy_settings.CLASSIFICATION_PLATEAU``)."""

from __future__ import annotations

import scripts.reproduce.tables.toy_settings as toy
from scripts.reproduce.spec import Comparison, Deviation, Metric, Row, TableSpec

KS = (1, 2, 5, 10, 20, 40)
ROWS = (Row("cross_entropy", "softmax cross-entropy", paper={"micro_f1": "-"}),
        *(Row(f"sparse_k{k}", f"sparse-softmax @ {k}", point={"k": k},
              paper={"micro_f1": "60.7 (IFLYTEK), 96.1 (OOS-eval)" if k == 20 else "-"})
          for k in KS))

# what the table said before its rows trained to a plateau (kept: the next run replaces it)
FORMER_BUDGET_NOTE = (
    "Before each row trained to its plateau at its own rate, every row trained a fixed 10 "
    "epochs at one lr (2e-3, batches of 64), the checkpoint of the best valid accuracy scored "
    "(3 seeds of the three compared rows): micro-F1 softmax cross-entropy 34.12 ± 0.53, "
    "sparse-softmax @ 1 37.78 ± 1.57, @ 20 41.15 ± 0.48; macro-F1 32.69 ± 0.77, 37.40 ± 0.64, "
    "39.62 ± 1.40. Both claims (k = 20 beats cross-entropy: +7.03, p 7.47e-05; k = 20 beats "
    "k = 1: +3.37, p 0.0549) were *not resolved: still learning*, no seed having stopped at "
    "a plateau (the former rule had said *holds* for both). A first run to a plateau stopped "
    "each row on its own criterion's valid loss (3 seeds each, all at a plateau): micro-F1 "
    "cross-entropy 28.35 ± 1.69 (lr 2.5e-3, 638-754 updates), @ 1 29.00 ± 2.06 (5e-3, "
    "928-1,044), @ 20 37.46 ± 2.24 (1.25e-3, 812-870), below the fixed budget's: the "
    "cross-entropy's valid loss is lowest after about 4 epochs while its valid accuracy "
    "rises for about 15 more, so the rows now stop on the valid error rate.")

SPEC = TableSpec(
    name="sparse_softmax_classification",
    title="many-class classification, micro-F1 against k",
    paper="Sparse-softmax, Figure 2 and classification tables",
    claim="With about 100 classes sparse-softmax at k = 20 gives the best micro-F1, above "
          "the softmax cross-entropy.",
    kind="classification",
    metrics=(Metric("micro_f1", "micro-F1 (%)"), Metric("macro_f1", "macro-F1 (%)")),
    rows=ROWS,
    comparisons=(
        Comparison("sparse_k20", "cross_entropy", "micro_f1",
                   "sparse-softmax k = 20 beats softmax cross-entropy"),
        Comparison("sparse_k20", "sparse_k1", "micro_f1", "k = 20 beats k = 1"),
    ),
    toy={"locale_dir": "/usr/share/locale", "min_per_class": 20, "max_per_class": 150,
         "batch_size": 64, "lr": 2e-3,
         "model_args": "--encoder-layers 1 --encoder-embed-dim 64 --encoder-ffn-embed-dim "
                       "128 --encoder-attention-heads 4 --dropout 0.1",
         **toy.CLASSIFICATION_PLATEAU},
    tiny={"min_per_class": 3, "max_per_class": 40, "batch_size": 16,
          "valid_per_mille": 200, "test_per_mille": 200,
          "model_args": "--encoder-layers 1 --encoder-embed-dim 16 --encoder-ffn-embed-dim "
                        "32 --encoder-attention-heads 2", **toy.CLASSIFICATION_PLATEAU_TINY},
    paper_settings={"locale_dir": "/usr/share/locale", "max_epoch": 10, "min_per_class": 20,
                    "max_per_class": 150, "batch_size": 32, "lr": 2e-5,
                    "model_args": "--encoder-layers 12 --encoder-embed-dim 768 "
                                  "--encoder-ffn-embed-dim 3072 --encoder-attention-heads 12"},
    deviations=(
        Deviation("data", "IFLYTEK, OOS-eval, WoS, RCV1-v2", "which program a gettext "
                  "message comes from (~75 classes)", "offline, many classes"),
        Deviation("model", "fine-tuned BERT-size encoders", "1-layer encoder of width 64 "
                  "from scratch", "CPU budget"),
        toy.classification_budget(),
    ),
    plot=("k", "micro_f1"),
    notes="There is no recipe for the paper's classification data sets; `--scale paper` "
          "prints the training commands for a `sentence_prediction` data-bin in `$DATA_BIN` "
          "with `$CLASSES` classes.\n\n" + FORMER_BUDGET_NOTE,
)
