"""A table's claims judged from its cells: each refused with its reason (:func:`refusal`,
in that order: not run, diverged, not one budget, stale, at or below a model that reads
nothing, still learning, a figure not measured, too few seeds; a claim on a cost only for
the first two and the last two), or tested by :mod:`scripts.reproduce.direction`, the
p-values Holm-corrected over every claim of the table.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Sequence

from scripts.reproduce.budget import (
    BUDGET,
    PILOT_SEEDS,
    TREND_VALIDATIONS,
    row_trend,
    still_falling_at,
)
from scripts.reproduce.direction import (
    ALPHA,
    NOT_RESOLVED,
    PAIRED,
    SIGN_FLIP,
    Spread,
    Test,
    decide,
    holm,
    paired,
    seeds_needed,
    spread,
    too_few_seeds,
    welch,
)
from scripts.reproduce.spec import Comparison, Metric, TableSpec, stale_words
from scripts.reproduce.stop_rule import still_falling, window

NOT_RUN = "not run"
STILL_LEARNING = f"{NOT_RESOLVED}: still learning"
STALE = f"{NOT_RESOLVED}: stale"
NOT_MEANINGFUL = "not meaningful"
# the closing clause of each kind's no-model reference line (its ``reference_line``)
NO_MODEL_CLAIM = f"a claim on such a row is {NOT_MEANINGFUL}, whatever the direction of its " \
    "difference."


@dataclass(frozen=True)
class NoModel:
    """A figure reached without a model (``what`` says how): a row at or below it has not
    learnt what the claim is about."""

    metric: Metric
    value: float
    what: str


def learning_field(cell: Any, key: str) -> Any:
    """A finished cell's record of how it learnt (``stopped``, ``updates``, ``curve``,
    ``lr``...): the cell's attribute, else its result's, else its figures'; else None."""
    value = getattr(cell, key, None)
    if value is not None:
        return value
    if key in cell.result:
        return cell.result[key]
    return cell.result.get("figures", {}).get(key)


def finished(cells: Sequence, row: str) -> List:
    """The cells of ``row`` that finished without diverging."""
    return [cell for cell in cells if cell.row.key == row and cell.result is not None
            and not cell.result["figures"].get("diverged")]


def seed_values(cells: Sequence, row: str, key: str) -> Dict[int, float]:
    """Seed -> ``row``'s finite figure ``key`` on it, over its finished cells."""
    found = {cell.seed: cell.result["figures"].get(key) for cell in finished(cells, row)}
    return {seed: float(value) for seed, value in found.items()
            if isinstance(value, (int, float)) and math.isfinite(value)}


def diverged(spec: TableSpec, cells: Sequence, row: str) -> str | None:
    """Why ``row`` is not judged: some of its seeds diverged (the others' mean would hide
    it), else None."""
    ran = [cell for cell in cells if cell.row.key == row and cell.result is not None]
    failed = [cell for cell in ran if cell.result["figures"].get("diverged")]
    if not failed:
        return None
    seeds = ", ".join(str(cell.seed) for cell in failed)
    return (f"{NOT_RESOLVED}: {spec.row(row).label} diverged on {len(failed)} of {len(ran)} "
            f"seeds (seed{'s' * (len(failed) > 1)} {seeds})")


def row_spread(cells: Sequence, row: str, key: str) -> Spread:
    return spread([cell.result["figures"].get(key, math.nan) for cell in finished(cells, row)])


def below_no_model(spec: TableSpec, cells: Sequence, row: str,
                   references: Mapping[str, Sequence[NoModel]]) -> str | None:
    """Why ``row`` reads no model (its mean at or below a :class:`NoModel` figure), or None."""
    for reference in references.get(row, ()):
        mean = row_spread(cells, row, reference.metric.key).mean
        if math.isnan(mean):
            continue
        worse = mean <= reference.value if reference.metric.higher_is_better else (
            mean >= reference.value)
        if worse:
            side = "at or below" if reference.metric.higher_is_better else "at or above"
            digits = reference.metric.digits
            return (f"{NOT_MEANINGFUL}: {spec.row(row).label}'s {reference.metric.label} "
                    f"{mean:.{digits}f} is {side} {reference.value:.{digits}f}, {reference.what}")
    return None


def update_span(updates: Sequence[Any]) -> str:
    """The recorded update counts as a span, e.g. 400 or 350-420; empty when none."""
    found = sorted(int(u) for u in updates if isinstance(u, (int, float)) and math.isfinite(u))
    return "-".join(str(u) for u in sorted({found[0], found[-1]})) if found else ""


def stale(spec: TableSpec, cells: Sequence, row: str) -> str | None:
    """Why ``row``'s figures are of older models (seeds whose parent was trained on after
    them), or None."""
    found = [cell for cell in cells if cell.row.key == row and cell.result is not None
             and cell.stale]
    if not found:
        return None
    seeds = ", ".join(str(cell.seed) for cell in found)
    return (f"{STALE}: {spec.row(row).label} seed{'s' * (len(found) > 1)} {seeds} "
            f"{stale_words(found[0].row, found[0].stale)}")


def still_learning(spec: TableSpec, cells: Sequence, row: str) -> str | None:
    """Why ``row`` may still be learning (a seed not stopped at a plateau, or stopped at one
    while its valid loss still fell), or None."""
    found = finished(cells, row)
    if any(learning_field(cell, BUDGET) for cell in found):
        return short_of_budget(spec.row(row).label, found)
    stops = [learning_field(cell, "stopped") for cell in found]
    capped = [cell for cell, stop in zip(found, stops) if stop != "plateau"]
    label = spec.row(row).label
    if not capped:
        falling_seeds = [cell for cell in found if spec.valid_loss_stop and still_falling(
            learning_field(cell, "curve"), learning_field(cell, "patience"))]
        if not falling_seeds:
            return None
        size = window(learning_field(falling_seeds[0], "patience"))
        return (f"{STILL_LEARNING}: {label}, {len(falling_seeds)} of {len(found)} seeds stopped "
                f"by the patience rule while the valid loss still fell over their last "
                f"{size} validations (least-squares slope, one-sided t-test at 5%, "
                f"{size - 2} df)")
    span = update_span([learning_field(cell, "updates") for cell in capped])
    after = f" after {span} updates" if span else ""
    at_cap = [cell for cell, stop in zip(found, stops) if stop == "cap"]
    unrecorded = len(capped) - len(at_cap)
    if not at_cap:
        return (f"{STILL_LEARNING}: {label}, {len(capped)} of {len(found)} seeds stopped"
                f"{after} without a plateau (a fixed budget)")
    improving = any(learning_field(cell, "still_improving") for cell in at_cap)
    return (f"{STILL_LEARNING}: {label}, {len(at_cap)} of {len(found)} seeds stopped at the "
            f"cap{after}" + (", still improving" if improving else "")
            + (f"; {unrecorded} without a recorded stop (a fixed budget)" if unrecorded else ""))


def short_of_budget(label: str, found: Sequence) -> str | None:
    """Why the seeds ``found`` of a row trained at a budget U may still be learning
    (different budgets, stopped before U, still falling at U), or None."""
    budgets = sorted({int(learning_field(cell, BUDGET) or 0) for cell in found})
    if len(budgets) > 1:
        return (f"{NOT_RESOLVED}: {label}'s seeds trained different budgets "
                f"({', '.join(str(b) for b in budgets)} updates; 0: none)")
    (budget,) = budgets
    short = [cell for cell in found if (learning_field(cell, "updates") or 0) < budget]
    if short:
        span = update_span([learning_field(cell, "updates") for cell in short])
        return (f"{NOT_RESOLVED}: {label}, {len(short)} of {len(found)} seeds stopped before "
                f"their budget of {budget} updates (at {span or 'an unrecorded update'})")
    pilot = [cell for cell in found if cell.seed <= PILOT_SEEDS] or found
    found_trend = row_trend([learning_field(cell, "curve") for cell in pilot])
    if not still_falling_at(found_trend):
        return None
    seeds = f"the mean of its {len(pilot)} seeds" if len(pilot) > 1 else "its one seed"
    if len(pilot) < len(found):
        seeds += f", the pilot of its {len(found)}"
    trend = "too few validations to test" if found_trend is None else found_trend.words()
    return (f"{STILL_LEARNING} at {budget}: {label}'s valid loss ({seeds}) still falls over "
            f"its last {TREND_VALIDATIONS} validations ({trend})")


def budget_mismatch(spec: TableSpec, cells: Sequence, rows: Sequence[str]) -> str | None:
    """Why two rows did not train one budget, else None."""
    budgets = {row: {learning_field(cell, BUDGET) or None for cell in finished(cells, row)}
               for row in rows}
    if len({frozenset(found) for found in budgets.values()}) == 1:
        return None
    words = [f"{spec.row(row).label} " + " and ".join(
        f"{b} updates" if b else "to its plateau" for b in sorted(
            found, key=lambda b: b or 0)) for row, found in budgets.items()]
    return f"{NOT_RESOLVED}: not one budget ({'; '.join(words)})"


def refusal(spec: TableSpec, claim: Comparison, cells: Sequence, ran: set,
            references: Mapping[str, Sequence[NoModel]]) -> str | None:
    """Why ``claim`` gets no verdict (the first reason in the module's order), or None."""
    rows = (claim.better, claim.worse)
    if not set(rows) <= ran:
        return NOT_RUN
    for row in rows:
        if not finished(cells, row):
            return f"{NOT_RESOLVED}: {spec.row(row).label} diverged on every seed"
    for row in rows:
        if why := diverged(spec, cells, row):
            return why
    if spec.metric(claim.metric).learned:
        if why := budget_mismatch(spec, cells, rows):
            return why
        for check in (lambda row: stale(spec, cells, row),
                      lambda row: below_no_model(spec, cells, row, references),
                      lambda row: still_learning(spec, cells, row)):
            for row in rows:
                if (why := check(row)) is not None:
                    return why
    for row in rows:
        if why := unmeasured(spec, cells, row, claim.metric):
            return why
    return too_few_seeds(*(row_spread(cells, row, claim.metric).n for row in rows))


def unmeasured(spec: TableSpec, cells: Sequence, row: str, key: str) -> str | None:
    """Why ``row`` cannot be compared on ``key`` (:meth:`Metric.unusable`), else None."""
    found, metric = finished(cells, row), spec.metric(key)
    why = [metric.unusable(cell.result) for cell in found]
    lacking, beside = why.count("missing"), why.count("beside")
    if lacking:
        return (f"{NOT_RESOLVED}: {spec.row(row).label} has no {metric.label} on "
                f"{lacking} of {len(found)} seeds (finished before it was measured)")
    if beside:
        return (f"{NOT_RESOLVED}: {spec.row(row).label}'s {metric.label} was measured beside "
                f"other jobs on {beside} of {len(found)} seeds (before timed steps ran "
                "alone)")
    return None


def finite(value: float) -> float | None:
    """``value`` for JSON: None where it is NaN or infinite."""
    return value if value is not None and math.isfinite(value) else None


# the most seeds a row gets for a claim (:func:`seeds_wanted`); a claim that needs more says
# how many
SEEDS_CAP = 10


def claim_test(spec: TableSpec, claim: Comparison, cells: Sequence
               ) -> tuple[Test, float | tuple]:
    """Paired where both rows finished the same seeds, else Welch's; with the spread
    ``seeds_needed`` reads: of the differences (paired), or both rows'."""
    metric = spec.metric(claim.metric)
    a, b = (seed_values(cells, row, claim.metric) for row in (claim.better, claim.worse))
    if len(a) >= 2 and set(a) == set(b):
        seeds = sorted(a)
        return (paired([a[s] for s in seeds], [b[s] for s in seeds], metric.higher_is_better,
                       claim.margin), spread([a[s] - b[s] for s in seeds]).std)
    a, b = list(a.values()), list(b.values())
    return (welch(a, b, metric.higher_is_better, claim.margin),
            (spread(a).std, spread(b).std))


def initial_weights(spec: TableSpec, cells: Sequence, rows: Sequence[str]) -> str:
    """Whether the same seed gave two rows the same initial weights: the same starting
    model, or from scratch the same parameter count (the data order is the seed's anyway)."""
    parents = [spec.row(row).parent or spec.row(row).same_as for row in rows]
    if any(parents):
        return ("shared: the same starting model" if parents[0] == parents[1] else
                "differ: each row starts from its own model")
    found = [{cell.result["figures"].get("params") for cell in finished(cells, row)}
             for row in rows]
    counts = [params.pop() if len(params) == 1 else None for params in found]
    if None in counts:
        return "not recorded"
    if counts[0] == counts[1]:
        return "shared"
    return f"differ: {int(counts[0]):,} and {int(counts[1]):,} parameters"


def judge(spec: TableSpec, cells: Sequence, data: Mapping[str, Any]) -> List[Dict[str, Any]]:
    """Per claim of ``spec``: its test, verdict, budget, seeds and the ``seeds_needed`` a
    side for 80% power at the Bonferroni level 5% / family (which Holm never asks more
    than). The Holm family is every claim of the spec: one not tested counts as p = 1."""
    references = data.get("no_model", {})
    ran = {cell.row.key for cell in cells if cell.result is not None}
    family = len(spec.comparisons)
    judged, tests = [], []
    for claim in spec.comparisons:
        test, sd = claim_test(spec, claim, cells)
        why = refusal(spec, claim, cells, ran, references)
        tests.append(None if why else test)
        rows = (claim.better, claim.worse)
        budgets = {learning_field(cell, BUDGET) for row in rows
                   for cell in finished(cells, row)} - {None, 0}
        needed = None
        if not why and test.n >= 2:
            needed = seeds_needed(test, sd, ALPHA / family)
        judged.append({"claim": claim.claim, "rows": list(rows),
                       "metric": claim.metric, "margin": claim.margin,
                       "test": test.kind if test.n >= 2 else None,
                       "difference": finite(test.d), "t": finite(test.t),
                       "df": finite(test.df), "p": finite(test.p), "p_holm": None,
                       "family": family, "verdict": why,
                       "budget": budgets.pop() if len(budgets) == 1 else None,
                       "seeds": {row: sorted(cell.seed for cell in cells if cell.row.key == row
                                             and cell.result is not None) for row in rows},
                       "initial_weights": initial_weights(spec, cells, rows)
                       if test.kind in (PAIRED, SIGN_FLIP) else None,
                       "seeds_needed": needed})
    # the family is every claim of the table: one not tested counts with p = 1
    adjusted = holm([1.0 if test is None else test.p for test in tests])
    for i, test in enumerate(tests):
        if test is None:
            continue
        judged[i]["p_holm"] = adjusted[i]
        verdict, needed = decide(test, adjusted[i]), judged[i]["seeds_needed"]
        if verdict == NOT_RESOLVED and needed is None:
            verdict = f"{NOT_RESOLVED}: no difference observed"
        elif verdict == NOT_RESOLVED and needed > test.n:  # the need, where it is more
            verdict = f"{NOT_RESOLVED}: needs about {needed} seeds a side"
        judged[i]["verdict"] = verdict
    return judged


def seeds_wanted(spec: TableSpec, cells: Sequence, data: Mapping[str, Any],
                 cap: int = SEEDS_CAP) -> Dict[str, int]:
    """Row -> the seeds the claims not resolved need, where that is within ``cap`` (both
    rows of a claim, so that they stay paired)."""
    wanted: Dict[str, int] = {}
    for claim in judge(spec, cells, data):
        needed = claim["seeds_needed"]
        have = min(len(seeds) for seeds in claim["seeds"].values())
        if claim["verdict"].startswith(NOT_RESOLVED) and needed and have < needed <= cap:
            for row in claim["rows"]:
                wanted[row] = max(wanted.get(row, 0), needed)
    return wanted
