"""ReLUFormer Table 4: sentence-level translation, ReLUFormer against softmax, sparsemax,
1.5-entmax and ReLA, with decoding latency."""

from __future__ import annotations

import scripts.reproduce.tables.toy_settings as toy
from scripts.reproduce.spec import Comparison, Deviation, Row

REGULARISED = ("--criterion", "regularized_label_smoothed_cross_entropy")
# row key (the recipe's MODEL too) -> label, --attention-activation, the paper's figures
MODELS = {
    "transformer": ("Transformer (softmax)", "softmax",
                    {"bleu": 34.22, "decode_cpu_seconds": "1x"}),
    "sparsemax": ("Sparsemax", "sparsemax", {"decode_cpu_seconds": "1.7x ReLUFormer"}),
    "entmax15": ("1.5-entmax", "entmax15", {"decode_cpu_seconds": "1.7x ReLUFormer"}),
    "rela": ("ReLA", "rela", {}),
    "relu_former": ("ReLUFormer", "relu",
                    {"bleu": 34.56, "decode_cpu_seconds": "comparable to Transformer"}),
}
ROWS = tuple(Row(key, label, ("--attention-activation", activation,
                              *(REGULARISED if activation == "relu" else ())),
                 paper=paper, recipe_model=key)
             for key, (label, activation, paper) in MODELS.items())

# what the table said before its rows trained to a plateau (kept: the figures are gone)
FORMER_BUDGET_NOTE = (
    "Before each row trained to its plateau at its own rate, every row stopped after 400 "
    "updates at one shared rate (5e-3), still learning fast: Transformer 11.88 ± 1.63 BLEU and "
    "5.06 ± 0.22 bits valid nll, ReLUFormer 5.22 ± 1.07 and 6.35 ± 0.26 (3 seeds each), first "
    "reported as *reversed*. Sparsemax (9.69) was measured at that budget too; 1.5-entmax "
    "(11.88) and ReLA (7.26) only at that budget: their rows are not yet trained by the "
    "protocol (\"not run\").")

# why the ReLUFormer row's records are newer than the others' (measured 2026-12-05)
RETRAINED_NOTE = (
    "The ReLUFormer row was trained again on 2026-12-05 (its checkpoints were gone, and its "
    "decoding CPU seconds had not been measured): the same settings, each seed in one run "
    "where the first training had been cut and resumed under an older launcher. Seed 3 "
    "reproduced its best model (8,094 updates, 43.39 BLEU, 2.212 bits); seeds 1 and 2 part "
    "from their first curves by 0.01 bits at updates 9,798 and 5,538 and then stopped "
    "elsewhere (11,644 and 9,656 updates; 44.45 and 43.43 BLEU, first 42.77 and 44.47). The "
    "row went from 43.54 to 43.76 BLEU; the parity claim stays *not resolved*. Its decoding "
    "CPU seconds were measured beside one other training; sparsemax's were measured again, "
    "quiet, from its kept models (their records keep their first curves and figures). "
    "Decoded again side by side, quiet (load 1.0), twice each, interleaved, with the cells' "
    "arguments and environment: ReLUFormer 5.82-6.38 CPU s (seed means 5.87, 5.98, 6.34), "
    "sparsemax 6.18-6.82 (6.31, 6.64, 6.63), 7% faster, *not resolved* (t 2.60, 3.77 df, "
    "p 0.064). Seed 1's recorded 7.33 CPU s is 25% above its quiet 5.87: beside a training, "
    "the CPU clock too can read the load.")

SPEC = toy.sentence_translation_table(
    name="relu_former_table4",
    title="sentence-level translation against sparse attentions, with latency",
    paper="ReLUFormer, Table 4",
    claim="ReLUFormer matches or beats the Transformer (34.56 vs 34.22 BLEU on IWSLT14 De-En) "
          "and decodes about as fast, 1.7x faster than sparsemax and 1.5-entmax.",
    metrics=(toy.BLEU, toy.VALID_NLL, toy.DECODE_CPU, toy.DECODE_SECONDS),
    rows=ROWS,
    comparisons=(
        Comparison("relu_former", "transformer", "bleu", "ReLUFormer >= Transformer in BLEU",
                   margin=1.0),
        Comparison("relu_former", "sparsemax", "decode_cpu_seconds",
                   "ReLUFormer decodes faster than sparsemax"),
        Comparison("relu_former", "entmax15", "decode_cpu_seconds",
                   "ReLUFormer decodes faster than 1.5-entmax"),
    ),
    deviations=(
        toy.gettext_data("IWSLT14 De-En"), toy.CPU_MODEL, toy.SENTENCE_BUDGET,
        Deviation("latency", "GPU decoding time",
                  "fairseq-generate's decoding loop in CPU seconds, one thread",
                  "no GPU; CPU time hardly depends on the machine's load, wall time does"),
    ),
    notes="decode CPU s is the CPU time of fairseq-generate's decoding loop for the test set "
          "(2,123 sentences, beam 4, one thread), decode s (wall) the same loop's wall time, "
          "fairseq's own figure, which reads whatever else ran on the machine (the claims "
          "test the CPU seconds; cells decoded before they were measured have none). At "
          "width 64 the attention weights are a small part of a decoding "
          "step, so this column says little about the activations' own cost; "
          "`python -m scripts.benchmarks.bench_attention` times the attention kernels side "
          "by side.\n\n" + toy.PARITY_NOTE + "\n\n" + RETRAINED_NOTE + "\n\n"
          + FORMER_BUDGET_NOTE,
)
