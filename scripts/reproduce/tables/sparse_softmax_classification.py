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
        toy.CLASSIFICATION_BUDGET,
    ),
    plot=("k", "micro_f1"),
    notes=toy.table_notes("sparse_softmax_classification"),
)
