"""A table's section of ``docs/reproduction.md`` from its cells' figures: per row and metric
our mean ± standard deviation beside the paper's, how each row learnt, the judged claims
(:mod:`scripts.reproduce.claims`) and the provenance. Each table owns the text between its two
markers; ``verdicts.json`` beside it keeps every table's rows and claims.
"""

from __future__ import annotations

import json
import math
import os
import platform
import re
from collections import Counter
from pathlib import Path
from typing import Any, Dict, List, Mapping, Sequence

from filelock import FileLock

from scripts.common.atomic_files import write_text_atomic
from scripts.common.plotting import line_plot, markdown_table
from scripts.common.repo_paths import git_commit
from scripts.reproduce.budget import budget_of
from scripts.reproduce.claims import judge, learning_field, update_span
from scripts.reproduce.direction import Spread, spread
from scripts.reproduce.kinds import stopping_loss
from scripts.reproduce.log_figures import ERROR, NLL, short_name
from scripts.reproduce.spec import Row, TableSpec, family, shown_rows, split_parent
from scripts.reproduce.tables import TABLES

NOT_RUN = "not yet run at toy scale in this repository"


def markers(name: str) -> tuple[str, str]:
    return f"<!-- reproduce:{name} start -->", f"<!-- reproduce:{name} end -->"


def spreads(spec: TableSpec, cells: Sequence) -> Dict[tuple, Spread]:
    """``(row, metric) -> Spread`` over the seeds that have a result."""
    done = [cell for cell in cells if cell.result is not None]
    return {(row, metric.key): spread([cell.result["figures"].get(metric.key, math.nan)
                                        for cell in done if cell.row.key == row])
            for row in {cell.row.key for cell in done} for metric in spec.metrics}


def result_table(spec: TableSpec, table: Dict[tuple, Spread],
                 diverged: Dict[str, int] | None = None) -> str:
    headers = ["row"]
    for metric in spec.metrics:
        arrow = "↑" if metric.higher_is_better else "↓"
        headers += [f"{metric.label} {arrow} (ours)", "paper"]
    headers.append("seeds")
    rows = []
    for row in shown_rows(spec):
        line = [row.label]
        seeds = 0
        for metric in spec.metrics:
            cell = table.get((row.key, metric.key), spread([]))
            seeds = max(seeds, cell.n)
            paper = row.paper.get(metric.key, "-")
            if isinstance(paper, (int, float)):
                paper = f"{paper:.{metric.digits}f}"
            line += [cell.text(metric.digits), paper]
        failed = (diverged or {}).get(row.key, 0)
        rows.append(line + [f"{seeds} (+{failed} diverged)" if failed else seeds])
    return markdown_table(headers, rows)


def number(value: float | None, digits: int, sign: str = "") -> str:
    return "-" if value is None else f"{value:{sign}.{digits}f}"


def claims_table(spec: TableSpec, judged: Sequence[Mapping[str, Any]],
                 previous: Mapping[str, str] | None = None) -> str:
    """The judged claims; with ``previous`` (claim -> verdict) the verdicts they replace."""
    rows = []
    for claim in judged:
        metric = spec.metric(claim["metric"])
        margin = claim["margin"]
        kind = "superiority" if margin is None else f"parity within {margin:g}"
        if claim["p"] is not None:  # a side of one seed has no test
            kind += f", {claim['test']}"
        if (claim.get("initial_weights") or "shared").startswith("differ"):
            kind += f"; initial weights {claim['initial_weights']}"
        line = [claim["claim"], metric.label, kind,
                number(claim["difference"], metric.digits, "+"), number(claim["t"], 2),
                number(claim["df"], 2), "-" if claim["p"] is None else f"{claim['p']:.3g}",
                "-" if claim["p_holm"] is None else f"{claim['p_holm']:.3g}", claim["verdict"]]
        if previous is not None:
            line.append(previous.get(claim["claim"], "-"))
        rows.append(line)
    headers = ["paper's claim", "metric", "test", "difference (ours)", "t", "df", "p",
               "Holm p", "verdict"]
    return markdown_table(headers + (["replaces"] if previous is not None else []), rows)


def first_recorded(cells: Sequence, key: str) -> Any:
    """The value of ``key`` in the first of ``cells`` that recorded it, else None."""
    return next((value for cell in cells if (value := learning_field(cell, key)) is not None),
                None)


def validation_loss(spec: TableSpec) -> tuple[str, str]:
    """The figure and the words of the validation loss ``spec``'s rows stop on."""
    metric = stopping_loss(spec)
    words = {NLL: "valid nll", ERROR: "valid error rate"}.get(metric, "valid loss")
    return f"valid_{short_name(metric)}", words


def own_criterion(words: str) -> str:
    """``words``, said to be each row's own criterion's loss where they are."""
    return words + (" (each row's own criterion)" if words == "valid loss" else "")


def rate_source(spec: TableSpec, row: Row) -> TableSpec:
    """The table whose rate grid chose ``row``'s rate (that of the row it starts from or
    is)."""
    other = row.same_as or row.parent
    if other is None:
        return spec
    table, key = split_parent(other)
    source = spec if table is None else TABLES[table]
    return rate_source(source, source.row(key))


def grid_loss(spec: TableSpec) -> str:
    """The words of the validation loss that chose the rates of ``spec``'s shown rows."""
    losses = {validation_loss(rate_source(spec, row))[1] for row in shown_rows(spec)}
    return " / ".join(sorted(losses)) or validation_loss(spec)[1]


def row_records(spec: TableSpec, cells: Sequence) -> Dict[str, Dict[str, Any]]:
    """Per shown or compared row: its rate, its rate grid and, per finished seed, how it
    stopped, its updates, validation curve and figures."""
    keys = {row.key for row in shown_rows(spec)} | {
        key for claim in spec.comparisons for key in (claim.better, claim.worse)}
    wanted = {metric.key for metric in spec.metrics} | {validation_loss(spec)[0], "diverged",
                                                         "reason"}
    records = {}
    for row in (row for row in spec.rows if row.key in keys):
        planned = [cell for cell in cells if cell.row.key == row.key]
        done = sorted((cell for cell in planned if cell.result), key=lambda cell: cell.seed)
        rated = done or [cell for cell in planned if getattr(cell, "rate_chosen", False)]
        seeds = [{"seed": cell.seed,
                  **{key: learning_field(cell, key)
                     for key in ("stopped", "still_improving", "updates", "curve")},
                  "figures": {k: v for k, v in cell.result["figures"].items() if k in wanted},
                  "commit": cell.result.get("commit")} for cell in done]
        records[row.key] = {"label": row.label, "lr": first_recorded(rated, "lr"),
                            "lr_grid": first_recorded(rated, "lr_grid") or [], "seeds": seeds}
    return records


def learning_table(records: Mapping[str, Mapping[str, Any]],
                   loss: str = "valid nll") -> str | None:
    """Per row: its rate, the rate grid (seed 1's best ``loss`` at each rate), how its seeds
    stopped and their updates; None when no cell recorded any of it."""
    if not any(record["lr"] is not None or any(seed["stopped"] for seed in record["seeds"])
               for record in records.values()):
        return None
    rows = []
    for record in (record for record in records.values()
                   if record["seeds"] or record["lr"] is not None):
        stops = [seed["stopped"] or "no record" for seed in record["seeds"]]
        grid = ", ".join(f"{lr:g}: " + number(plain(nll), 2) for lr, nll in record["lr_grid"])
        rows.append([record["label"], "-" if record["lr"] is None else f"{record['lr']:g}",
                     grid or "-",
                     ", ".join(f"{stops.count(s)} {s}" for s in sorted(set(stops))) or "-",
                     update_span([seed["updates"] for seed in record["seeds"]]) or "-"])
    return markdown_table(["row", "rate", f"rate grid (seed 1's {loss})", "stopped",
                           "updates"], rows)


def plain(value: Any) -> Any:
    """``value`` for strict JSON: NaN and infinities (a diverged seed's figures) as None."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return value


def verdicts(spec: TableSpec, cells: Sequence, data: Mapping[str, Any], scale: str,
             seeds: int) -> Dict[str, Any]:
    """What ``verdicts.json`` keeps of one table: its rows and its judged claims."""
    done = sum(cell.result is not None for cell in cells)
    return {"paper": spec.paper, "title": spec.title, "scale": scale, "seeds": seeds,
            "cells": f"{done} of {len(cells)}", "rows": row_records(spec, cells),
            "claims": judge(spec, cells, data)}


def write_verdicts(store: Path, name: str, entry: Mapping[str, Any]) -> Dict[str, Any]:
    """Put table ``name``'s ``entry`` into ``store`` (under a lock: two tables finishing at
    once both land); returns every table's entries."""
    store.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(store.parent / f".{store.name}.lock"):
        found = json.loads(store.read_text()) if store.is_file() else {}
        found[name] = plain(entry)
        write_text_atomic(store, json.dumps(found, indent=1, sort_keys=True,
                                            allow_nan=False) + "\n")
    return found


def summary_section(found: Dict[str, Dict], specs: Sequence[TableSpec]) -> str:
    """The closing note: every table's claims and verdicts, and those they replace."""
    start, end = markers("summary")
    rows = []
    for spec in specs:
        name, entry = spec.name, found.get(spec.name)
        if entry is None:
            rows += [[f"`{name}` ({spec.paper})", claim.claim, NOT_RUN, "-", "-"]
                     for claim in spec.comparisons]
            continue
        for claim in entry["claims"]:
            rows.append([f"`{name}` ({entry['paper']})", claim["claim"], claim["verdict"],
                         claim.get("replaces", "-"),
                         f"{entry['scale']}, {entry['seeds']} seed(s), {entry['cells']} cells"])
    return "\n".join([start, "## Closing note: the papers' claims at our scale\n",
                      "Per claim: *holds*, *reversed*, *not resolved*, or refused with its "
                      "reason (*not run*, *not meaningful*, *not resolved: still learning*), "
                      "by the protocol at the top of this page.\n",
                      markdown_table(["table", "paper's claim", "verdict", "replaces", "run"],
                                     rows), end])


def curve_plot(spec: TableSpec, table: Dict[tuple, Spread], path: Path) -> Path | None:
    """The plotted metric against the rows' point, a line per row family, or against a
    measured figure (``metric:KEY``, e.g. a cost), a point per row."""
    if spec.plot is None:
        return None
    point, metric = spec.plot
    label = spec.metric(metric).label
    x_metric = spec.metric(point.split(":", 1)[1]) if point.startswith("metric:") else None
    xlabel = x_metric.label if x_metric else point
    series: Dict[str, tuple[List[float], List[float]]] = {}
    for row in shown_rows(spec):
        y = table.get((row.key, metric), spread([]))
        x = table.get((row.key, x_metric.key), spread([])).mean if x_metric else (
            row.point.get(point, math.nan))
        if y.n and not math.isnan(x):
            xs, ys = series.setdefault(row.label if x_metric else family(row), ([], []))
            xs.append(x)
            ys.append(y.mean)
    # a line needs two points: two rows, or a family of two
    enough = len(series) > 1 if x_metric else any(len(xs) > 1 for xs, _ in series.values())
    if not enough:
        return None
    return line_plot(path, series, title=f"{spec.paper}: {label} against {xlabel}",
                     xlabel=xlabel, ylabel=label, logx=True)


def machine() -> str:
    load = ", ".join(f"{v:.1f}" for v in os.getloadavg())
    return (f"{platform.machine()} {platform.system()}, {os.cpu_count()} cores, "
            f"Python {platform.python_version()}; load average at report time {load}")


def busy_seconds(cells: Sequence) -> float:
    """The table's wall time: how long at least one of its cells was running (two cells
    side by side count once; the time between calls not at all)."""
    spans = []
    for cell in cells:
        seconds = cell.result.get("seconds") if cell.result else None
        if not seconds:
            continue
        end = cell.result.get("finished_at") or (cell.folder / "result.json").stat().st_mtime
        spans.append((end - seconds, end))
    busy, reach = 0.0, -math.inf
    for begin, end in sorted(spans):
        busy += max(0.0, end - max(begin, reach))
        reach = max(reach, end)
    return busy


def section(spec: TableSpec, cells: Sequence, data: Dict, scale: str, seeds: int,
            command: str, plot_dir: Path | None = None,
            previous: Mapping[str, str] | None = None) -> str:
    """The markdown of one table: results, claims (beside ``previous`` verdicts) and
    provenance."""
    table = spreads(spec, cells)
    done = [cell for cell in cells if cell.result is not None]
    start, end = markers(spec.name)
    lines = [start, f"## {spec.paper}: {spec.title} (`{spec.name}`)\n",
             f"Paper's claim: {spec.claim}\n",
             f"Command: `{command}` (paper scale: `python -m scripts.reproduce {spec.name} "
             "--scale paper --dry-run` prints the recipes' fairseq commands, `--collect-only` "
             "reads their logs)\n"]
    if not done:
        budget = budget_of(spec.settings(scale))
        none = f"none yet at this table's budget of {budget:,} updates" if budget else NOT_RUN
        lines.append(f"Results: {none} (scale {scale}). The command above runs it; the "
                     "paper's figures are listed for comparison.\n")
    # per row, the seeds that stopped on a NaN or infinite loss
    diverged = Counter(cell.row.key for cell in done if cell.result["figures"].get("diverged"))
    lines += [result_table(spec, table, diverged), ""]
    grid, loss = grid_loss(spec), validation_loss(spec)[1]
    learning = learning_table(row_records(spec, cells), grid)
    if learning is not None:
        # the stop's loss said once, unless it is not the grid's (rows from another table)
        stop = loss if loss == grid else own_criterion(loss)
        lines += [f"How each row learnt: its learning rate (chosen on seed 1 from the grid by "
                  f"{own_criterion(grid)}), how its seeds stopped (`plateau`: {stop} stopped "
                  "improving; `cap`: its update or epoch cap came first, at a table's budget the "
                  "budget's end) and their updates.\n",
                  learning, ""]
    if data.get("references"):
        lines += [data["references"], ""]
    if spec.comparisons and not done:
        lines += ["Claims the table tests (each needs its rows to have finished learning, at "
                  "a plateau or at the table's budget, on at least three seeds):\n",
                  *[f"- {claim.claim} ({spec.metric(claim.metric).label}"
                    + ("" if claim.margin is None else f", parity within {claim.margin:g}")
                    + ")" for claim in spec.comparisons], ""]
    elif spec.comparisons:
        lines += ["Each claim by the protocol at the top of this page: the difference in the "
                  "paper's favour, tested on the per-seed differences (paired t-test) where "
                  "both rows ran the same seeds, else Welch's t-test (an exact sign-flip or "
                  "permutation test where the spread is zero); two-sided at 5%, a parity "
                  f"claim one-sided at 2.5% against its margin; p Holm-corrected over the "
                  f"table's {len(spec.comparisons)} claims, tested or not. A claim whose rows "
                  "have not finished learning, read no model, diverged on a seed or have "
                  "fewer than 3 seeds is refused with the reason; one not resolved says the "
                  "seeds a side that 80% power would need at its observed difference and "
                  "spread.\n",
                  claims_table(spec, judge(spec, cells, data), previous), ""]
    if plot_dir is not None and done:
        plotted = curve_plot(spec, table, plot_dir / f"{spec.name}.png")
        if plotted is not None:
            lines.append(f"![{spec.plot[1]} against {spec.plot[0].split(':')[-1]}]"
                         f"({plotted.parent.name}/{plotted.name})\n")
    if done:
        wall = sum(cell.result.get("seconds") or 0 for cell in done)
        # cells from before the commit was recorded measured in-process CPU time wrongly
        timed = [cell for cell in done if cell.result.get("commit")]
        cpu = sum(cell.result.get("cpu_seconds") or 0 for cell in timed)
        commits = sorted({cell.result.get("commit") or "not recorded"
                          for cell in done})
        cpus = sorted({cell.result.get("cpu") or "not recorded" for cell in done})  # float path
        loads = [cell.result["load_average"][0] for cell in done
                 if cell.result.get("load_average")]
        load = (f"; 1-minute load average when the cells finished {min(loads):.1f} to "
                f"{max(loads):.1f}" if loads else "")
        lines.append(f"Scale `{scale}`, {seeds} seed(s); {len(done)} of {len(cells)} cells "
                     f"finished; wall time {busy_seconds(done) / 60:.1f} min (cells "
                     f"running), cell time {wall / 60:.1f} min in all, CPU time "
                     + (f"{cpu / 60:.1f} min" if timed else "not recorded")
                     + f"; data: {data.get('description', '-')}; cells run at "
                     f"commit {', '.join(commits)}; CPU {' / '.join(cpus)}; report at "
                     f"commit {git_commit()}; machine: {machine()}{load}.\n")
    if spec.deviations:
        lines += ["Settings at toy scale against the paper's:\n", markdown_table(
            ["setting", "paper", "ours (toy)", "why"],
            [[d.setting, d.paper, d.ours, d.why] for d in spec.deviations]), ""]
    if spec.notes:
        lines += [spec.notes, ""]
    lines.append(end)
    return "\n".join(lines)


def write_section(path: Path, name: str, text: str, header: str) -> Path:
    """Put ``text`` between the markers of ``name`` in ``path`` (appended when absent)."""
    current = path.read_text(encoding="utf-8") if path.is_file() else header
    start, end = markers(name)
    pattern = re.compile(re.escape(start) + ".*?" + re.escape(end), re.S)
    summary = markers("summary")[0]
    if pattern.search(current):
        updated = pattern.sub(lambda _: text, current)
    elif name != "summary" and summary in current:  # the closing note stays last
        head, tail = current.split(summary, 1)
        updated = head.rstrip("\n") + "\n\n" + text + "\n\n" + summary + tail
    else:
        updated = current.rstrip("\n") + "\n\n" + text + "\n"
    return write_text_atomic(path, updated)
