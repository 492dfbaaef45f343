"""The demo's three sizes (``--tiny``, the default, ``--full``): every figure that makes a
run bigger or smaller, for the translation models and (``SummaryScale``) the summaries'."""

from __future__ import annotations

from dataclasses import dataclass, replace

from scripts.common.run_record import Budget, Run
from scripts.demo.summary_data import SummaryScale


@dataclass(frozen=True)
class Scale:
    """Everything that makes a demo run bigger or smaller."""

    name: str
    max_train: int | None      # training pairs kept (None: all)
    max_test: int              # test sentences decoded
    bpe_merges: int
    layers: int
    dim: int
    ffn: int
    heads: int
    max_tokens: int            # tokens per batch
    max_update: int            # update budget of a translation model, trained to the end
    # A safety net, not a budget: several times what the model needs on 2 quiet cores, so
    # that only a broken or hopelessly slow machine hits it; the table then marks the model
    # "not finished" and the comparisons leave it out.
    safety_cap_s: float
    finetune_update: int       # updates of each continuation of the softmax Transformer
    beam: int
    warmup: int
    lr: float
    analysis_sentences: int
    generated_train: int       # training pairs of the generated fallback task
    summary: SummaryScale
    heldout_per_mille: int = 15  # share of catalog pairs in valid, and again in test
    sparse_from_scratch: bool = True  # the continuations always run

    def budget(self, run: Run) -> Budget:
        """The size and training budget of one of the demo's runs."""
        if run.data == "summaries":
            s = self.summary
            return Budget(s.layers, s.dim, s.ffn, s.heads, s.max_tokens, s.max_update,
                          s.safety_cap_s, s.warmup, s.lr)
        budget = Budget(self.layers, self.dim, self.ffn, self.heads, self.max_tokens,
                        self.max_update, self.safety_cap_s, self.warmup, self.lr)
        if run.parent is None:
            return budget
        # a continuation: its own update budget and the matching share of the safety cap
        return replace(budget, max_update=self.finetune_update,
                       time_budget_s=self.safety_cap_s * self.finetune_update
                       / self.max_update)


SCALES = {
    # tiny holds out more, so that a fixture catalog of a few hundred pairs has a test set
    "tiny": Scale("tiny", 400, 40, 150, 1, 32, 64, 2, 1200, 20, 600.0, 10, 2, 10, 3e-3, 20,
                  400,
                  SummaryScale(source_tokens=64, target_tokens=16, vocab=200, layers=2, dim=32,
                               ffn=64, heads=2, max_tokens=512, max_update=10,
                               safety_cap_s=600.0, warmup=5, lr=3e-3, max_test=20,
                               min_train_docs=30, heldout_per_mille=150, generated_docs=120),
                  heldout_per_mille=80),
    # safety caps of an hour: 800 updates take about 190 s on 2 quiet cores (0.22 CPU s an
    # update), the summaries' 700 about 210 s; even a machine loaded six times over finishes
    "default": Scale("default", 30000, 500, 3000, 2, 128, 256, 4, 2048, 800, 3600.0, 300, 4,
                     300, 2e-3, 300, 20000,
                     SummaryScale(source_tokens=512, target_tokens=40, vocab=1000, layers=2,
                                  dim=64, ffn=128, heads=4, max_tokens=4096, max_update=700,
                                  safety_cap_s=3600.0, warmup=80, lr=5e-3, max_test=250,
                                  min_train_docs=200, heldout_per_mille=40,
                                  generated_docs=400, transpooler=False),
                     sparse_from_scratch=False),
    "full": Scale("full", None, 1000, 6000, 3, 256, 1024, 4, 4096, 3000, 6 * 3600.0, 1000, 5,
                  1000, 1e-3, 500, 60000,
                  SummaryScale(source_tokens=2048, target_tokens=48, vocab=8000, layers=3,
                               dim=128, ffn=256, heads=4, max_tokens=8192, max_update=1500,
                               safety_cap_s=6 * 3600.0, warmup=150, lr=1e-3, max_test=200,
                               min_train_docs=200, heldout_per_mille=60,
                               generated_docs=2000)),
}
