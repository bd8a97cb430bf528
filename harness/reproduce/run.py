"""``archsearch reproduce``: run a reproduction's grid studies, then write its summaries and reports."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dashboards.files import atomic_write
from dashboards.report import write_report
from harness.reproduce.analysis import StudyNumbers, summarize
from harness.reproduce.studies import DEFAULT_DATASET, plan
from harness.reproduce.summary import markdown_summary, study_figures
from harness.search import run_search
from harness.store import Store
from search_space.validation import load_spec


def reproduce(
    study: str,
    store_url: str,
    *,
    scale: str,
    seeds: int,
    protocols: tuple[str, ...] = ("generalisation", "capacity"),
    dataset: str = DEFAULT_DATASET,
    data_dir: str | None = None,
    address: str | None = None,
    output: Path,
    command: str,
    results_dir: Path | None = None,
    margin: float | None = None,
    large_margin: float | None = None,
    run: bool = True,
) -> list[Path]:
    """Run the study's grid searches, then write a Markdown summary and an HTML report for each.

    ``run=False`` writes the summaries and reports again from the store (e.g. with another
    ``margin``) without running anything.
    """
    output.mkdir(parents=True, exist_ok=True)
    written = []
    for planned in plan(study, scale, seeds, protocols, dataset, data_dir):
        protocol = planned.protocol
        spec = load_spec(planned.spec, check_paths=address is None)
        if run:
            run_search(spec, store_url, address=address, results_dir=results_dir)
        with Store.open(store_url, create=False) as store:
            store.study(spec.name)  # with run=False: a one-line error if the study was never run
            numbers = StudyNumbers()
            options = {
                "margin": protocol.margin if margin is None else margin,
                "large_margin": protocol.large_margin if large_margin is None else large_margin,
                "numbers": numbers,
            }
            rows, verdicts, _ = summarize(store, spec.name, protocol, **options)
            trials = store.trials(spec.name)
            outcomes = {
                str(variant): group["status"].value_counts().to_dict()
                for variant, group in trials.groupby("config.name")
            }
            figures = study_figures(store, spec.name, rows, output, numbers.level)
            summary = output / f"{spec.name}.md"
            text = markdown_summary(spec.name, protocol, rows, verdicts, command, None, outcomes, numbers)
            text += "".join(f"\n![{title}]({path.name})\n" for title, path in figures)
            atomic_write(summary, text)
            color = "config.model.layout" if spec.family == "coatnet" else "config.model.layer_scale"
            report = write_report(
                store, [spec.name], dict(spec.objectives), output / f"{spec.name}.html", color_by=color
            )
        written += [summary, report, *(path for _, path in figures)]
    return written


def reproduce_coatnet_layouts(store_url: str, **kwargs: Any) -> list[Path]:
    """The CoAtNet layout study (both protocols): ``reproduce("coatnet-layouts", ...)``."""
    return reproduce("coatnet-layouts", store_url, **kwargs)
