"""Export a study that evaluated a whole discrete space (a grid) as a tabular benchmark.

    python -m benchmarks.table_export --store sqlite:////work/tables/table.db \\
        --study coatnet-mnist5k-table -o benchmarks/tables/coatnet-mnist5k.csv.gz

``--study`` given several times writes one table of several grids of one space (the same searched
parameters and epochs; a configuration in two of them is refused), e.g. two grids whose union holds a
front no single grid holds without growing (``benchmarks/tables/README.md``).

Writes the format of ``benchmarks/tables/README.md`` (see :mod:`benchmarks.table`): one row per
completed configuration and epoch, the study's searched parameters as columns (named as in its
spec), its reserved columns from the store (each epoch's validation top-1 and time; the in-trial
FLOPs, parameters and throughput). Only trials that completed every epoch are exported; the
command says how many others there were. The file is gzip-compressed with a fixed timestamp, so
exporting the same study twice writes the same bytes.
"""

from __future__ import annotations

import argparse
import gzip
import io
import os
import sys
from pathlib import Path

import pandas as pd

from benchmarks.table import RESERVED, TableError, load_table
from harness.store import Store
from search_space.sampling import params_of_config
from search_space.spec import SearchSpec


def table_frame(store: Store, study: str) -> tuple[pd.DataFrame, dict[str, int]]:
    """(the table, counts of the study's trials by status) of a study in the store."""
    spec = SearchSpec.model_validate(store.study(study)["spec"])
    trials = store.trials(study, flatten_config=False)
    counts = trials["status"].value_counts().to_dict()
    done = trials[trials["status"] == "completed"]
    epochs = int(spec.training.get("epochs", 0)) or None
    curves = store.learning_curves(study, [int(n) for n in done["number"]])
    searched = [name for name, domain in spec.params.items() if not hasattr(domain, "fixed")]
    rows = []
    complete = 0
    for trial in done.itertuples():
        curve = curves[curves["number"] == trial.number].sort_values("epoch")
        if epochs is not None and list(curve["epoch"]) != list(range(1, epochs + 1)):
            continue
        complete += 1
        values = params_of_config(spec, trial.config, searched)
        for point in curve.itertuples():
            rows.append(
                {
                    "config_id": None,
                    "epoch": int(point.epoch),
                    "top1": point.top1,
                    "epoch_s": point.epoch_time,
                    "flops": trial.flops,
                    "params": trial.params,
                    "throughput": trial.throughput,
                    **values,
                    "_number": int(trial.number),
                }
            )
    frame = pd.DataFrame(rows, columns=[*RESERVED, *searched, "_number"])
    # config_id: the configuration's place in the sorted space (stable whatever order trials ran in)
    order = frame.drop_duplicates("_number").sort_values(searched, kind="stable")["_number"]
    ids = {number: i for i, number in enumerate(order)}
    frame["config_id"] = frame["_number"].map(ids)
    frame = frame.drop(columns="_number").sort_values(["config_id", "epoch"]).reset_index(drop=True)
    frame[["flops", "params"]] = frame[["flops", "params"]].astype("Int64")  # exact counts, not %g
    counts["exported"] = complete
    return frame, counts


def merged(frames: list[pd.DataFrame], studies: list[str]) -> pd.DataFrame:
    """Several studies' tables as one: the same parameter columns and epochs, each configuration's id its
    place in the sorted union (as :func:`table_frame` numbers one study's)."""
    columns, epochs = list(frames[0].columns), frames[0]["epoch"].max()
    for frame, study in zip(frames[1:], studies[1:], strict=True):
        if list(frame.columns) != columns or frame["epoch"].max() != epochs:
            raise TableError(
                f"{study}: its table has columns {list(frame.columns)} and {frame['epoch'].max()} epochs, "
                f"{studies[0]}'s {columns} and {epochs}: export studies of one space and one budget together"
            )
    searched = [c for c in columns if c not in RESERVED]
    tagged = [f.assign(_config=f"{k}:" + f["config_id"].astype(str)) for k, f in enumerate(frames)]
    frame = pd.concat(tagged, ignore_index=True)
    order = frame.drop_duplicates("_config").sort_values(searched, kind="stable")["_config"]
    frame["config_id"] = frame["_config"].map({key: i for i, key in enumerate(order)})
    return frame.drop(columns="_config").sort_values(["config_id", "epoch"]).reset_index(drop=True)


def write_table(frame: pd.DataFrame, path: Path) -> None:
    """Write atomically (a temporary name, then renamed); ``.gz``: gzip with a fixed timestamp."""
    text = frame.to_csv(index=False, float_format="%.6g").encode()
    data = text
    if path.suffix == ".gz":
        buffer = io.BytesIO()
        with gzip.GzipFile(fileobj=buffer, mode="wb", mtime=0, filename="") as handle:
            handle.write(text)
        data = buffer.getvalue()
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    temporary.write_bytes(data)
    temporary.replace(path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--store", required=True)
    parser.add_argument("--study", required=True, action="append", help="a study; several: one table of them")
    parser.add_argument("-o", "--output", required=True, type=Path)
    args = parser.parse_args(argv)
    frames, counts = [], {}
    with Store.open(args.store, create=False, read_only=True) as store:
        for study in args.study:
            frame, study_counts = table_frame(store, study)
            if frame.empty:
                print(f"{study}: no trial completed every epoch; nothing written", file=sys.stderr)
                return 1
            frames.append(frame)
            for status, count in study_counts.items():
                counts[status] = counts.get(status, 0) + count
    try:
        frame = merged(frames, args.study)
        temporary = args.output.with_name(f".{args.output.name}.check-{os.getpid()}{''.join(args.output.suffixes)}")
        write_table(frame, temporary)
        try:
            load_table(temporary)  # the file reads back as a valid table (one configuration in two studies: refused)
        finally:
            temporary.unlink(missing_ok=True)
    except TableError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    write_table(frame, args.output)
    table = load_table(args.output)
    others = {k: v for k, v in counts.items() if k not in ("completed", "exported")}
    print(
        f"{args.output}: {len(table)} configurations x {table.epochs} epochs, parameters "
        f"{', '.join(table.param_names)}; trials not exported: {others or 'none'}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
