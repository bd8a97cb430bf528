"""One self-contained HTML report of one or more studies: spec, provenance, counts, Pareto table and figures.

The file has to survive being mailed, attached to a ticket or opened on an air-gapped cluster,
so everything is inline and nothing is fetched: CSS in a <style> block, plotly.js once in the head
and each figure an interactive plotly ``<div>`` (:mod:`dashboards.interactive`: hover names the
trial, log-scaled knobs on log axes, parameter importance). ``static=True`` writes the earlier form
instead, no script at all: every figure a base64 PNG (seaborn, :mod:`dashboards.figures`), the
same PNGs ``png_dir`` writes for papers. Every user-provided string (study names, specs, config
values) goes through Jinja2's autoescaping, because specs and configs are free text that must not
become markup.
"""

from __future__ import annotations

import base64
import contextlib
import io
import json
import re
import unicodedata
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import yaml
from jinja2 import Environment

from dashboards import compare, fidelity, figures, interactive
from dashboards.columns import log_scaled_columns, searched_config_columns
from dashboards.pareto import (
    front_mask,
    hypervolume_progress,
    query_front,
    resolve_color_by,
    studies_objectives,
)
from dashboards.reader import StudyReader
from dashboards.verified import compare_fronts, load_footnote, load_marks
from trials.config.data_config import DATA_STARVED_FRACTION
from trials.status import StudyStatus, TrialStatus

from .files import OutputSet, write_output

_MAX_PARAM_PANELS = 12  # objective-vs-parameter panels per study; more is unreadable in a page

_TEMPLATE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>archsearch report: {{ studies | map(attribute='name') | join(', ') }}</title>
{% if plotly_js %}<script>{{ plotly_js | safe }}</script>
{% endif %}
<style>
body { font-family: -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; margin: 2em auto; max-width: 1250px;
       color: #222; padding: 0 1em; }
h1 { border-bottom: 2px solid #444; padding-bottom: .2em; }
h2 { margin-top: 2em; border-bottom: 1px solid #bbb; }
table { border-collapse: collapse; margin: .6em 0; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: .25em .6em; text-align: right; }
th { background: #f0f0f0; }
td.text, th.text { text-align: left; }
pre { background: #f7f7f7; border: 1px solid #ddd; padding: .8em; overflow-x: auto; font-size: 0.85em; }
figure { margin: 1em 0; }
figure img { max-width: 100%; border: 1px solid #eee; }
figcaption { color: #555; font-size: 0.9em; }
figure.interactive { border: 1px solid #eee; }
.meta td:first-child { font-weight: bold; text-align: left; }
.muted { color: #777; }
.warning { background: #fff4e5; border-left: 4px solid #e69500; padding: .5em .8em; }
</style>
</head>
<body>
<h1>archsearch report</h1>
<p class="muted">Generated {{ generated }} &middot; objectives:
{% for name, direction in objectives.items() %}<b>{{ name }}</b> ({{ direction }}){% if not loop.last %}, {% endif %}
{% endfor %}</p>
{% if comparison %}
<section id="several-studies">
<h2>Several studies</h2>
{% if comparison.line %}<p class="warning">{{ comparison.line }}</p>
{% else %}<p class="muted">The studies agree on dataset, image size, budget and objectives.</p>{% endif %}
{% if comparison.rows %}
<h3>Spec differences</h3>
<table class="spec-differences">
<tr><th class="text">key</th>{% for name in comparison.studies %}<th class="text">{{ name }}</th>{% endfor %}</tr>
{% for key, values in comparison.rows %}
<tr><td class="text">{{ key }}</td>{% for v in values %}<td class="text">{{ v }}</td>{% endfor %}</tr>
{% endfor %}
</table>
{% endif %}
{% for fig in comparison.figures %}
{% if fig.html %}<figure class="combined interactive">{{ fig.html | safe }}
{% else %}<figure class="combined"><img alt="{{ fig.caption }}" src="data:image/png;base64,{{ fig.data }}">
{% endif %}<figcaption>{{ fig.caption }}</figcaption></figure>
{% endfor %}
</section>
{% endif %}
{% for s in studies %}
<section id="study-{{ loop.index }}">
<h2>Study {{ s.name }}</h2>
<table class="meta">
<tr><td>status</td><td class="text">{{ s.status }}</td></tr>
<tr><td>created</td><td class="text">{{ s.created_at }}</td></tr>
<tr><td>archsearch version</td><td class="text">{{ s.version }}</td></tr>
<tr><td>git commit</td><td class="text">{{ s.git_commit }}</td></tr>
<tr><td>hardware</td><td class="text">{% if s.hardware %}<table class="hardware">
{% for k, v in s.hardware %}<tr><td class="text">{{ k }}</td><td class="text">{{ v }}</td></tr>
{% endfor %}</table>{% else %}not recorded{% endif %}</td></tr>
</table>
<h3>Trials by status</h3>
<table class="counts">
<tr>{% for k in s.counts %}<th>{{ k }}</th>{% endfor %}</tr>
<tr>{% for v in s.counts.values() %}<td>{{ v }}</td>{% endfor %}</tr>
</table>
{% if s.starved_note %}
<h3>Data-starved epochs</h3>
<p class="muted">{{ s.starved_note }}</p>
{% if s.starved_rows %}
<table class="starved">
<tr><th>trial</th><th class="text">status</th><th>starved epochs</th><th class="text">epochs</th>
<th>worst data wait</th><th>images/s then</th></tr>
{% for row in s.starved_rows %}
<tr>{% for v in row %}<td{% if loop.index in (2, 4) %} class="text"{% endif %}>{{ v }}</td>{% endfor %}</tr>
{% endfor %}
</table>
{% endif %}
{% endif %}
<h3>Pareto front ({{ s.front_total }} trials)</h3>
{% for note in s.notes %}<p class="muted">{{ note }}</p>
{% endfor %}
{% if s.front_rows %}
<table class="front">
<tr>{% for c in s.front_columns %}<th class="text">{{ c }}</th>{% endfor %}</tr>
{% for row in s.front_rows %}
<tr>{% for v in row %}<td>{{ v }}</td>{% endfor %}</tr>
{% endfor %}
</table>
{% else %}<p class="muted">No completed trial has every objective: no front yet.</p>{% endif %}
{% if s.fidelity %}
<h3>Does an early epoch rank like the end?</h3>
<p class="verdict"><b>{{ s.fidelity.verdict }}</b></p>
{% if s.fidelity.rows %}
<table class="fidelity">
<tr>{% for c in s.fidelity.columns %}<th>{{ c }}</th>{% endfor %}</tr>
{% for row in s.fidelity.rows %}
<tr>{% for v in row %}<td>{{ v }}</td>{% endfor %}</tr>
{% endfor %}
</table>
{% endif %}
{% for note in s.fidelity.notes %}<p class="muted">{{ note }}</p>
{% endfor %}
{% endif %}
<h3>Figures</h3>
{% for fig in s.figures %}
{% if fig.html %}<figure class="interactive" id="{{ fig.key }}">{{ fig.html | safe }}
{% else %}<figure id="{{ fig.key }}"><img alt="{{ fig.caption }}" src="data:image/png;base64,{{ fig.data }}">
{% endif %}<figcaption>{{ fig.caption }}</figcaption></figure>
{% endfor %}
<h3>Spec</h3>
<pre>{{ s.spec }}</pre>
</section>
{% endfor %}
</body>
</html>
"""


def _decoded(value: Any) -> Any:
    """JSON columns come back as text on some backends; the report wants the structure."""
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def _dump(value: Any) -> str:
    """YAML when available (how specs are written), JSON otherwise."""
    try:
        return yaml.safe_dump(value, sort_keys=False, default_flow_style=False, allow_unicode=True)
    except Exception:  # unserialisable objects or no PyYAML: JSON with str() fallback still shows it
        return json.dumps(value, indent=2, default=str)


def varying_config_columns(frame: pd.DataFrame) -> list[str]:
    """Config columns whose value differs between trials: the searched knobs (constants would be noise)."""

    def varies(column: str) -> bool:
        # JSON text, so list and dict values (unhashable) compare too.
        return frame[column].map(lambda v: json.dumps(v, sort_keys=True, default=str)).nunique(dropna=False) > 1

    # The seed is a replicate index, not a searched knob.
    return [c for c in frame.columns if c.startswith("config.") and c != "config.seed" and varies(c)]


def _cell(value: Any) -> str:
    if value is None or (isinstance(value, float) and not np.isfinite(value)):
        return ""
    if isinstance(value, (float, np.floating)):
        return f"{value:.6g}"
    if isinstance(value, (list, dict)):
        return json.dumps(value, default=str)
    return str(value)


def _png(fig: Any) -> bytes:
    buffer = io.BytesIO()
    try:
        fig.savefig(buffer, format="png", dpi=90, bbox_inches="tight")
    finally:
        plt.close(fig)  # a report over many studies must not keep every figure alive
    return buffer.getvalue()


_SLUG_BYTES = 120  # a PNG's name stays far below the 255-byte file-name limit with its figure and temporary suffixes


def _slug(text: str) -> str:
    """A study name as a file-name stem: letters (any script), digits, ``_``, ``.`` and ``-`` kept, each run
    of anything else one ``_``, cut to :data:`_SLUG_BYTES` bytes of UTF-8. Letters of every script stay,
    so ``exp-α`` and ``exp-β`` keep apart; names that still meet are told apart by :func:`_png_stems`."""
    slug = re.sub(r"[^\w.-]+", "_", unicodedata.normalize("NFC", text)).strip("_.")
    slug = slug.encode("utf-8")[:_SLUG_BYTES].decode("utf-8", errors="ignore")
    return slug or "study"


COMBINED_STEM = "studies"  # the several-studies scatter's PNG: studies-pareto.png


def _png_stems(studies: Sequence[str]) -> dict[str, str]:
    """Each study's PNG stem (``<stem>-pareto.png``, ...), unique: a study whose :func:`_slug` is taken (by an
    earlier study, or by ``studies``, the combined scatter's, when there are several) gets ``-2``, ``-3``, ...
    in the studies' order, so the same command names the same files. Compared case- and
    normalisation-blind, as macOS and Windows compare file names: ``Exp`` and ``exp`` would be one file."""
    taken = {COMBINED_STEM} if len(studies) > 1 else set()
    stems: dict[str, str] = {}
    for name in studies:
        base = stem = _slug(name)
        suffix = 2
        while stem.casefold() in taken:
            stem, suffix = f"{base}-{suffix}", suffix + 1
        taken.add(stem.casefold())
        stems[name] = stem
    return stems


def _scatter_caption(objectives: Mapping[str, str]) -> str:
    """What the Pareto scatter shows: the front of 2 objectives, or a 2-objective view of the front of 3."""
    pair = " vs ".join(list(objectives)[:2])
    if len(objectives) <= 2:
        return f"Pareto front of {pair}"
    return (
        f"Pareto front of {', '.join(objectives)} seen in the plane of {pair} (a 2-objective view: the members "
        f"marked are the front of all {len(objectives)} objectives, so no step line joins them)"
    )


# Up to this many trials a report draws every trial and decodes every config, as for any small study.
# Above it, trials are drawn as a density with the front on top, and the objective-vs-parameter
# panels use a stated random sample of the completed trials, so the report's time and size stay flat.
LARGE_STUDY = 2_000
PARAM_SAMPLE = 2_000  # completed trials whose configs the parameter panels of a large study show
MAX_CURVES = 10  # learning curves of at most this many front members (the best by the first objective)
MAX_FRONT_ROWS = 50  # rows of the front table; the total is stated
MAX_STARVED_ROWS = 50  # trials the data-starved table names (the worst first); the total is stated


def _empty_section(record: Mapping[str, Any]) -> dict[str, Any]:
    hardware = _decoded(record.get("hardware"))
    return {
        "name": record.get("name"),
        "status": record.get("status"),
        "created_at": record.get("created_at"),
        "version": record.get("archsearch_version"),
        "git_commit": record.get("git_commit") or "unknown",
        "hardware": _hardware_rows(hardware),
        "spec": _dump(_decoded(record.get("spec"))),
        "notes": [],
        "figures": [],
        "front_rows": [],
        "front_columns": [],
        "front_total": 0,
        "starved_note": "",
        "starved_rows": [],
    }


def _as_shown(store: StudyReader, name: str) -> tuple[dict[str, Any], dict[str, int] | None]:
    """The study's record with the status ``studies`` shows, and, where that differs (a ``running`` study
    whose driver is gone: ``interrupted``, with why), the trial counts it shows (the trials that driver
    left ``running`` counted ``interrupted``); None where they are the stored ones. A read writes nothing."""
    record = store.study(name)
    if record.get("status") != StudyStatus.RUNNING:
        return record, None
    listed = store.studies()
    shown = listed[listed["name"] == name]
    if shown.empty or shown.iloc[0]["status"] == StudyStatus.RUNNING:
        return record, None
    row = shown.iloc[0]
    counts = {str(status): int(row[status]) for status in TrialStatus}
    return {**record, "status": row["status"], "status_message": row["message"]}, counts


def _hardware_rows(hardware: Any) -> list[tuple[str, str]]:
    """The recorded hardware as (key, value) rows; lists joined, nested values as short text."""
    if not isinstance(hardware, Mapping):
        return [("recorded", str(hardware))] if hardware else []
    rows = []
    for key, value in hardware.items():
        if isinstance(value, (list, tuple)):
            value = ", ".join(str(v) for v in value) or "none"
        elif isinstance(value, float) and value.is_integer():
            value = int(value)
        elif isinstance(value, Mapping):
            value = json.dumps(value, default=str)
        rows.append((str(key), str(value)))
    return rows


def _sample_numbers(outcomes: pd.DataFrame, size: int, seed: int = 0) -> np.ndarray:
    """A reproducible random sample of the completed trials' numbers (all of them when there are few)."""
    completed = outcomes.loc[outcomes["status"] == TrialStatus.COMPLETED, "number"].to_numpy()
    if len(completed) <= size:
        return completed
    return np.sort(np.random.default_rng(seed).choice(completed, size=size, replace=False))


def _verified_notes(store: StudyReader, name: str, front: pd.DataFrame, objectives: Mapping[str, str]) -> list[str]:
    """What ``archsearch verify`` found for this front: verified medians and who drops off."""
    verified = store.verified(name)
    if verified.empty or not len(front) or not set(front["number"]) & set(verified["number"]):
        return []
    table = compare_fronts(front, verified.set_index("number"), dict(objectives))
    rounds, device = int(verified["rounds"].iloc[-1]), verified["device"].iloc[-1]
    values = "; ".join(
        f"#{int(r.number)} {r.throughput_verified:.0f} img/s [{r.throughput_verified_min:.0f}, "
        f"{r.throughput_verified_max:.0f}]"
        for r in table.itertuples()
        if pd.notna(getattr(r, "throughput_verified", None))
    )
    dropped = [str(int(n)) for n in table.loc[~table["on_verified_front"], "number"]]
    note = f"Front re-measured alone ({rounds} interleaved rounds on {device}): {values}."
    return [note + (f" off the front on verified values: {', '.join(dropped)}" if dropped else "")]


def _epoch_list(epochs: Sequence[int], shown: int = 12) -> str:
    """``1, 2, 5`` (and ``... (+N)`` past ``shown``): which epochs, short enough for a cell."""
    listed = ", ".join(str(int(e)) for e in epochs[:shown])
    return listed + (f", ... (+{len(epochs) - shown})" if len(epochs) > shown else "")


def _starved_epochs(store: StudyReader, name: str, n_epochs: int) -> dict[str, Any]:
    """The trials whose epochs waited for data more than :data:`DATA_STARVED_FRACTION` of their time.

    An epoch that starved measured the input pipeline, not the model: its images/s (and a
    throughput objective read from it) understate the architecture. Named here so such trials
    are not read as slow models; worst first, at most :data:`MAX_STARVED_ROWS` rows.
    """
    if not n_epochs:
        return {}
    limit = f"{100 * DATA_STARVED_FRACTION:.0f}%"
    starved = store.data_starved_epochs(name, DATA_STARVED_FRACTION)
    if starved.empty:
        return {"starved_note": f"No epoch of the {n_epochs:,} recorded waited more than {limit} of its time for data."}
    worst = starved.loc[starved.groupby("number")["data_wait_fraction"].idxmax()]
    worst = worst.sort_values(["data_wait_fraction", "number"], ascending=[False, True])
    epochs = starved.groupby("number")["epoch"].apply(list)
    rows = [
        [int(r.number), r.status, len(epochs[r.number]), _epoch_list(epochs[r.number]),
         f"{100 * r.data_wait_fraction:.0f}%", _cell(r.images_per_s)]
        for r in worst.head(MAX_STARVED_ROWS).itertuples()
    ]  # fmt: skip
    note = (
        f"{len(starved):,} of {n_epochs:,} epochs in {len(worst):,} trials spent more than {limit} of their time "
        "waiting for data (the input pipeline, not the model, set their speed: give such trials more "
        "search.resources.cpus)."
    )
    if len(worst) > MAX_STARVED_ROWS:
        note += f" The table shows the {MAX_STARVED_ROWS} that waited most."
    return {"starved_note": note, "starved_rows": rows}


def _study_section(
    store: StudyReader,
    name: str,
    objectives: Mapping[str, str] | None,
    color_by: str | None,
    png_dir: PngFolder | None,
    static: bool = False,
    section_index: int = 0,
    rule: fidelity.RuleSource | None = None,
    *,
    png_stem: str,
) -> dict[str, Any]:
    """``png_stem``: this study's unique file-name stem for ``--png`` (:func:`_png_stems`).

    Long because it lays out one section of the report in reading order (front, figures, tables, fidelity,
    verification), each a few lines; split, the order would be scattered.
    """
    record, shown_counts = _as_shown(store, name)
    objectives = dict(objectives) if objectives else store.objectives(name)
    section = _empty_section({**record, "name": name})
    if record.get("status_message"):  # why it ended (a stop rule, a failure, an interruption)
        why = str(record["status_message"]).removeprefix(f"{record['status']}: ")  # said once: "Study interrupted: ..."
        section["notes"].append(f"Study {record['status']}: {why}")
    counts = store.study_counts(name)
    section["counts"] = {k: (shown_counts or counts.by_status).get(k, 0) for k in counts.by_status}  # stored order
    if not counts.total:
        section["notes"].append("This study has no trials yet.")
        return section
    section.update(_starved_epochs(store, name, counts.epochs))
    section["fidelity"] = _fidelity_panel(store, name, rule)
    outcomes = store.outcomes(name, list(objectives), strict=False)
    if shown_counts is not None:  # the trials a gone driver left running
        outcomes = outcomes.assign(status=outcomes["status"].replace(TrialStatus.RUNNING, TrialStatus.INTERRUPTED))
    present = len(objectives) >= 2
    large = len(outcomes) > LARGE_STUDY
    mask = front_mask(outcomes, objectives) if present else np.zeros(len(outcomes), dtype=bool)
    outcomes = outcomes.assign(on_front=mask)
    front = outcomes[mask]
    first, direction = next(iter(objectives.items()))
    if len(front):
        front = front.sort_values([first, "number"], ascending=[direction == "min", True], kind="stable")
    shown_front = front.head(MAX_FRONT_ROWS)
    curve_numbers = [int(n) for n in front["number"].head(MAX_CURVES)]

    # Configs: every trial's for a small study; for a large one, the shown front's and a random sample's.
    sample = _sample_numbers(outcomes, PARAM_SAMPLE) if large else outcomes["number"].to_numpy()
    wanted = np.union1d(sample, shown_front["number"].to_numpy())
    configs = store.configs(name, wanted.tolist())
    frame = outcomes.merge(configs, on="number", how="left") if len(configs.columns) > 1 else outcomes
    sampled = frame[frame["number"].isin(sample)]
    varying = varying_config_columns(sampled if large else frame)
    # A searched parameter is always a column, even where every trial took one value (the reader
    # asked about it); other config keys only where they vary.
    config_columns = [c for c in frame.columns if c.startswith("config.")]
    searched = searched_config_columns(_decoded(record.get("spec")), config_columns)
    columns = ["number", *objectives, *dict.fromkeys([*searched, *varying])]
    shown = frame.set_index("number").loc[shown_front["number"]].reset_index()
    section["notes"].extend(_verified_notes(store, name, front, objectives))
    section["front_columns"] = columns
    section["front_rows"] = [[_cell(r.get(c)) for c in columns] for r in shown.to_dict("records")]
    if "throughput" in columns:  # a throughput measured beside other work: marked, and the note says why
        marks = load_marks(store, name, shown["number"])
        at = columns.index("throughput")
        for row, number in zip(section["front_rows"], shown["number"], strict=True):
            if int(number) in marks:
                row[at] += "*"
        if note := load_footnote({f"trial {n}": why for n, why in marks.items()}):
            section["notes"].append(note)
    section["front_total"] = len(front)
    if len(front) > len(shown_front):
        section["notes"].append(
            f"The front has {len(front):,} trials: the table shows the {len(shown_front)} best by {first}."
        )

    log_columns = log_scaled_columns(_decoded(record.get("spec")), varying)
    figs: list[_Figure] = []
    if present:  # the front of every objective, its first two the plane: the table's front, marked in the scatter
        caption = _scatter_caption(objectives) + (f", coloured by {color_by}" if color_by else "")
        live_caption = caption + ": hover a point for its trial, objectives and searched parameters"
        if large:
            caption += f" (all {len(outcomes):,} trials as a density; the front's members as points)"
            live_caption += f" (all {len(outcomes):,} trials, each a point)"
        figs.append(
            _Figure(
                "pareto",
                caption,
                lambda: figures.pareto_scatter(frame, objectives, color_by, density=large),
                lambda: interactive.pareto_scatter(
                    _hover_frame(store, name, frame, objectives, varying, color_by, large),
                    objectives,
                    varying,
                    color_by,
                ),
                live_caption,
            )
        )
        progress = hypervolume_progress(outcomes, objectives)
        figs.append(
            _Figure(
                "hypervolume",
                "Hypervolume against finished trials",
                lambda: figures.hypervolume_curve(progress),
                lambda: interactive.hypervolume_curve(progress),
            )
        )
    if curve_numbers:
        curves = store.learning_curves(name, curve_numbers)
        if len(front) > len(curve_numbers):
            caption = (
                f"Learning curves of the {len(curve_numbers)} front members with the best {first} "
                f"(of {len(front):,} on the front)"
            )
        else:
            caption = "Learning curves of the front's trials"
        figs.append(
            _Figure(
                "curves",
                caption,
                lambda: figures.learning_curves(curves, curve_numbers),
                lambda: interactive.learning_curves(curves, curve_numbers),
            )
        )
    if present and varying:
        panels = varying[:_MAX_PARAM_PANELS]
        n_completed = int((outcomes["status"] == TrialStatus.COMPLETED).sum())
        caption = f"{first} against the searched parameters"
        if large and n_completed > len(sample):
            caption += f" (a random sample of {len(sample):,} of {n_completed:,} completed trials, seed 0)"
        figs.append(
            _Figure(
                "params",
                caption,
                lambda: figures.objective_vs_params(
                    sampled, first, panels, direction, of_total=n_completed, log_params=log_columns
                ),
                lambda: interactive.objective_vs_params(sampled, first, panels, log_columns),
                caption + (f"; log axes for {', '.join(c.removeprefix('config.') for c in log_columns)}"
                           if log_columns else ""),
            )
        )  # fmt: skip
        if not static:
            importances = interactive.param_importances(sampled, objectives, panels, log_columns)
            if importances:
                n_used = int((sampled["status"] == TrialStatus.COMPLETED).sum())
                caption = (
                    f"Parameter importance per objective (Optuna's {' and '.join(importances)}) over "
                    f"{n_used:,} completed trials"
                    + (", a random sample, seed 0" if large and n_completed > len(sample) else "")
                )
                if "fANOVA" in importances and n_used > interactive.FANOVA_TRIALS:
                    caption += f"; fANOVA on a random {interactive.FANOVA_TRIALS:,} of them (seed 0)"
                figs.append(
                    _Figure("importance", caption, None, lambda: interactive.importance_bars(importances, n_used))
                )
            else:
                section["notes"].append(
                    "No parameter importance: it needs at least 4 completed trials and a parameter that varies."
                )

    for figure in figs:
        entry = figure.render(static, png_dir, f"{png_stem}-{figure.key}", f"s{section_index}-{figure.key}")
        if entry is not None:
            section["figures"].append(entry)
    return section


def _fidelity_panel(store: StudyReader, name: str, rule: fidelity.RuleSource | None) -> dict[str, Any] | None:
    """``archsearch fidelity STUDY`` as a panel (on at most :data:`dashboards.fidelity.REPORT_TRIALS` completed
    trials, a seeded sample beyond); None where it cannot say anything (no completed trial, no learning curve of
    the accuracy objective)."""
    try:
        result = fidelity.study_fidelity(store, name, rule, max_trials=fidelity.REPORT_TRIALS)
    except fidelity.FidelityError:  # no completed trial, no learning curve, no accuracy objective: nothing to say
        return None
    columns = list(result.rows()[0]) if result.rows() else []
    rows = [[row[c] for c in columns] for row in result.rows()]
    return {"verdict": result.verdict, "columns": columns, "rows": rows, "notes": result.notes()}


@dataclass(frozen=True)
class PngFolder:
    """Where ``--png`` writes the figures: staged in the report's :class:`OutputSet`, so the report and
    its PNGs land together or not at all."""

    directory: Path
    outputs: OutputSet

    def write(self, name: str, data: bytes) -> None:
        self.outputs.write(self.directory / f"{name}.png", data)


class _Figure:
    """One report figure, drawn the static way (seaborn PNG), the interactive way (plotly), or both.

    Drawing is deferred: a PNG is drawn only for ``--png`` or a static report, a plotly figure only
    for an interactive one, so neither form pays for the other.
    """

    def __init__(
        self,
        key: str,
        caption: str,
        draw_png: Callable[[], Any] | None,
        draw_live: Callable[[], Any] | None,
        live_caption: str | None = None,
    ):
        self.key, self.caption, self.live_caption = key, caption, live_caption or caption
        self.draw_png, self.draw_live = draw_png, draw_live

    def render(self, static: bool, png_dir: PngFolder | None, png_name: str, div_id: str) -> dict[str, Any] | None:
        """The template's entry (``caption`` with ``data`` or ``html``); writes the PNG when asked."""
        entry: dict[str, Any] = {"key": div_id}
        if self.draw_png is not None and (static or png_dir is not None):
            data = _png(self.draw_png())
            if png_dir is not None:
                png_dir.write(png_name, data)
            if static:
                return {**entry, "caption": self.caption, "data": base64.b64encode(data).decode("ascii")}
        if static or self.draw_live is None:
            return None
        return {**entry, "caption": self.live_caption, "html": interactive.figure_html(self.draw_live(), div_id)}


def _hover_frame(
    store: StudyReader,
    name: str,
    frame: pd.DataFrame,
    objectives: Mapping[str, str],
    varying: list[str],
    color_by: str | None,
    large: bool,
) -> pd.DataFrame:
    """Every trial with the searched parameters its hover label shows. A small study's configs are
    already decoded; a large one's are read in SQL for just those keys (100k configs are never decoded)."""
    if not large:
        return frame
    keys = list(dict.fromkeys([*varying, *([color_by] if color_by else [])]))
    return store.outcomes(name, list(objectives), config_keys=keys, strict=False)


def _comparison(
    store: StudyReader,
    studies: Sequence[str],
    objectives: Mapping[str, str],
    png_dir: PngFolder | None,
    static: bool = False,
) -> dict[str, Any] | None:
    """The several-studies section: what differs (one line and a table of spec keys) and one scatter.

    Side-by-side sections hide that two fronts were measured differently, and separate scatters
    hide how they overlap; so the trials of every study share one Pareto scatter coloured by study
    (its front is the union's), with the differences stated above it. None for a single study.
    """
    if len(studies) < 2:
        return None
    specs = {name: store.study(name).get("spec") for name in studies}
    table = compare.differing_spec_keys(specs)
    section: dict[str, Any] = {
        "line": compare.differences_line(compare.spec_differences(specs)),
        "studies": list(studies),
        "rows": [(key, [values[name] for name in studies]) for key, values in table],
        "figures": [],
    }
    frames = [
        store.outcomes(name, list(objectives), strict=False).assign(study=name)
        for name in studies
        if store.study_counts(name).total
    ]
    if len(objectives) < 2 or not frames:
        return section
    frame = pd.concat(frames, ignore_index=True)
    large = len(frame) > LARGE_STUDY
    caption = f"{_scatter_caption(objectives)} over {', '.join(studies)}, coloured by study"
    figure = _Figure(
        "pareto",
        caption + (f" (all {len(frame):,} trials as a density; the front's members as points)" if large else ""),
        lambda: figures.pareto_scatter(frame, objectives, "study", density=large),
        lambda: interactive.pareto_scatter(frame, objectives, (), "study"),
        caption + ": hover a point for its study and trial",
    )
    entry = figure.render(static, png_dir, f"{COMBINED_STEM}-pareto", "studies-pareto")
    if entry is not None:
        section["figures"].append(entry)
    return section


def _check_metrics(store: StudyReader, studies: Sequence[str], objectives: Mapping[str, str]) -> None:
    """Refuse (:class:`ParetoError`) objectives a study with trials does not record, by ``archsearch pareto``'s
    own query and words (``unknown metric 'foo'; known: ...``): a report on such a metric would be an empty
    front under headings that read like a result. A study's own objectives are always known."""
    with_trials = [name for name in studies if store.study_counts(name).total]
    if with_trials:
        query_front(store, with_trials, objectives, with_configs=False)


def write_report(
    store: StudyReader,
    studies: Sequence[str],
    objectives: Mapping[str, str] | None,
    out_path: str | Path | None,
    png_dir: str | Path | None = None,
    color_by: str | None = None,
    static: bool = False,
    rule: fidelity.RuleSource | None = None,
) -> Path | None:
    """Write one offline HTML report for ``studies`` to ``out_path`` and return its path (None:
    written to standard output, as ``out_path`` None asks).

    ``objectives`` (``{"top1": "max", "flops": "min"}``) defaults to each study's own when empty
    (several studies must then agree on them, as for ``archsearch pareto``: :func:`studies_objectives`);
    given, every study with trials must record them (:func:`_check_metrics`). The scatter's axes are
    the first two, its marked front that of all of them. A study named twice is reported once.
    ``png_dir`` also writes every figure as ``<study>-<figure>.png``, ``<study>`` a unique file-name
    stem of the name (:func:`_png_stems`), and, for several studies, their combined scatter as
    ``studies-pareto.png``. ``static``: PNG figures in the page and no script, instead of the
    interactive figures. ``rule``: the early-stopping rule the fidelity panel replays, as a spec ->
    ``RungRule`` function (default: the registered one).
    """
    studies = list(dict.fromkeys(studies))  # a study named twice is one section, as in `pareto`
    if color_by is not None:  # before anything is created: an unknown column is the user's error
        columns = sorted({c for name in studies for c in store.config_columns(name)})
        color_by = resolve_color_by(color_by, columns)
    # Before anything is created: objectives that differ between studies, an unknown metric, a damaged column.
    if objectives:
        _check_metrics(store, studies, objectives)
    shown = dict(objectives) if objectives else studies_objectives(store, studies)
    stems = _png_stems(studies)
    out = Path(out_path) if out_path is not None else None  # None: standard output
    created: list[Path] = []  # folders this report made: removed again if it fails
    with OutputSet() as outputs:  # the report and its PNGs land together, or none of them does
        try:
            png = None
            if png_dir is not None:
                created += _make_folder(Path(png_dir))
                png = PngFolder(Path(png_dir), outputs)
            sections = [
                _study_section(store, name, objectives, color_by, png, static, index, rule, png_stem=stems[name])
                for index, name in enumerate(studies, start=1)
            ]
            comparison = _comparison(store, studies, shown, png, static)
            env = Environment(autoescape=True, trim_blocks=True, lstrip_blocks=True)
            html = env.from_string(_TEMPLATE).render(
                comparison=comparison,
                plotly_js="" if static else interactive.plotly_js(),
                studies=sections,
                objectives=shown,
                generated=datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            )
            if out is None:
                write_output(None, html)
            else:  # created once the report is whole: a refused report leaves no folder behind
                created += _make_folder(out.parent)
                outputs.write(out, html)
            outputs.commit()  # a failure before this leaves the previous report and PNGs intact
        except BaseException:
            outputs.discard()
            for folder in reversed(created):
                with contextlib.suppress(OSError):
                    folder.rmdir()  # only if empty: nothing of anyone's is removed
            raise
    return out


def _make_folder(folder: Path) -> list[Path]:
    """Create ``folder`` (and its missing parents); the ones created, outermost first."""
    missing = [parent for parent in [folder, *folder.parents] if not parent.exists()][::-1]
    folder.mkdir(parents=True, exist_ok=True)
    return missing
