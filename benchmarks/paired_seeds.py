"""Early stopping against the same method without it, seed by seed, read from committed replay results.

    python -m benchmarks.paired_seeds coatnet-mnist5k=benchmarks/results/search_quality.json \\
        coatnet-mnist5k-n1000=benchmarks/results/held_out/coatnet-mnist5k-n1000.json \\
        coatnet-mnist5k-e32=benchmarks/results/held_out/coatnet-mnist5k-e32.json

Prints :func:`benchmarks.search_quality.paired_table`: for each early-stopping method of each result, its
per-seed difference from the same method without early stopping (the two replayed on the same seeds, so a
seed's pair shares its spread and first proposals). Issue 60 item 3 asks that early stopping be never worse
than the method without it; two medians over seeds, each with its own interval, cannot say that where the
intervals overlap, and the pairs can. Nothing is replayed: the per-seed values are in each JSON.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from benchmarks.search_quality import paired_table


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("results", nargs="+", metavar="NAME=RESULT.json",
                        help="a table's name and its search_quality result")  # fmt: skip
    args = parser.parse_args(argv)
    results = {}
    for argument in args.results:
        name, separator, path = argument.partition("=")
        if not separator or not name or not path:
            print(f"error: {argument!r}: give NAME=RESULT.json", file=sys.stderr)
            return 2
        try:
            results[name] = json.loads(Path(path).read_text())
            paired_table({name: results[name]})  # a file that is not a result (no per-seed values) fails here
        except (OSError, ValueError, KeyError, TypeError) as error:
            print(f"error: {path}: not a search_quality result ({type(error).__name__}: {error})", file=sys.stderr)
            return 2
    print(paired_table(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
