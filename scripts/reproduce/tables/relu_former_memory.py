"""ReLUFormer section 3: the FFN as a key-value memory, softmax vs softmax + LayerNorm vs
ReLU over its slots, as the number of slots (the FFN width) grows."""

from __future__ import annotations

import scripts.reproduce.tables.toy_settings as toy
from scripts.reproduce.spec import Comparison, Deviation, Row

# a small and a large memory (x8): 18 cells, 41.5 min on 2 cores at the former fixed
# 400-update budget (measured, --jobs 2); a third point at 2,048 would double the FFN's cost
SLOTS = (128, 1024)
PAPER_SLOTS = 2048  # the paper's figures are for the base Transformer's FFN
ACTIVATIONS = {"relu": "ReLU memory (stock FFN)", "softmax": "softmax memory",
               "softmax_ln": "softmax memory + LayerNorm"}
PAPER = {"relu": 34.22, "softmax": 33.08, "softmax_ln": 34.21}


def _memory_row(key: str, slots: int) -> Row:
    # the toy run and the paper-scale recipe take the same flags
    flags = ("--attention-activation", "softmax", "--ffn-activation", key,
             "--encoder-ffn-embed-dim", str(slots), "--decoder-ffn-embed-dim", str(slots))
    return Row(f"{key}_{slots}", f"{ACTIVATIONS[key]} @ {slots}", flags, point={"slots": slots},
               paper={"bleu": f"{PAPER[key]} at {PAPER_SLOTS}" if slots == SLOTS[-1] else "-"},
               recipe_model="relu_former", recipe_flags=flags)


ROWS = tuple(_memory_row(key, slots) for slots in SLOTS for key in ACTIVATIONS)


# The grid screens for 8 epochs, not Table 4's 20 (about 5 CPU-hours less): in Table 4's
# two grids the best rate was the same at 4 to 20 epochs.
SCREENING_EPOCHS = 8

# what the table said before its rows trained to a plateau (kept: the figures are gone)
# two cells stopped by a kill before a stop by hand kept a training's CPU time
CPU_UNDERCOUNT_NOTE = (
    "The CPU time above counts only the last part of two 128-slot cells, softmax seed 3 and "
    "softmax + LayerNorm seed 1: each was stopped by hand at a session's end (at 4,118 and "
    "3,550 updates) and resumed from its checkpoint, and the stop did not yet keep the CPU "
    "seconds already spent. At their rows' measured 0.24-0.25 CPU s an update, the table's CPU "
    "time is about 30 minutes short.")
FORMER_BUDGET_NOTE = (
    "Before each row trained to its plateau at its own rate, every row stopped after 400 "
    "updates at one shared rate (5e-3), still learning fast (3 seeds each, BLEU and valid nll "
    "in bits): at 128 slots ReLU 12.83 ± 1.86 and 4.90 ± 0.08, softmax 11.99 ± 1.28 and "
    "4.99 ± 0.12, softmax + LayerNorm 8.27 ± 0.35 and 5.70 ± 0.04; at 1,024 slots ReLU "
    "4.68 ± 0.98 and 5.76 ± 0.15, softmax 13.04 ± 0.42 and 4.89 ± 0.05, softmax + LayerNorm "
    "7.87 ± 0.71 and 5.69 ± 0.16. All three claims were first reported as *reversed*.")

SPEC = toy.sentence_translation_table(
    name="relu_former_memory",
    toy={"max_epoch": SCREENING_EPOCHS},
    title="FFN as key-value memory against the number of slots",
    paper="ReLUFormer, section 3",
    claim="ReLU over the memory slots beats softmax (34.22 vs 33.08 BLEU) and matches "
          "softmax + LayerNorm (34.21), and ReLU pulls ahead as the slots grow to 3072-4096.",
    metrics=(toy.BLEU, toy.VALID_NLL),
    rows=ROWS,
    comparisons=(
        Comparison(f"relu_{SLOTS[-1]}", f"softmax_{SLOTS[-1]}", "bleu",
                   f"ReLU memory beats softmax memory at {SLOTS[-1]} slots"),
        Comparison(f"relu_{SLOTS[-1]}", f"softmax_ln_{SLOTS[-1]}", "bleu",
                   f"ReLU memory matches softmax + LayerNorm at {SLOTS[-1]} slots", margin=1.0),
        Comparison(f"relu_{SLOTS[-1]}", f"softmax_{SLOTS[-1]}", "valid_nll",
                   f"ReLU memory's valid nll below softmax memory's at {SLOTS[-1]} slots"),
    ),
    deviations=(
        Deviation("slots", "32 to 4096", ", ".join(map(str, SLOTS)), "CPU budget"),
        toy.CPU_MODEL, toy.sentence_budget(SCREENING_EPOCHS), toy.gettext_data("IWSLT14 De-En"),
    ),
    plot=("slots", "bleu"),
    notes=toy.PARITY_NOTE + "\n\n" + FORMER_BUDGET_NOTE + "\n\n" + CPU_UNDERCOUNT_NOTE,
)
