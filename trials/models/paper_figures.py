"""The papers' own numbers for the presets: parameters and FLOPs at 224x224, one table.

These are what the presets are checked against (tests: exact builds, the closed-form cost model,
fvcore's counts) and what ``benchmarks.measure`` prints beside its FLOP counts. FLOPs are the
papers' "FLOPs", i.e. multiply-adds, in billions. Sources: CaiT (Touvron et al. 2021),
CoAtNet (Dai et al. 2021) and DeiT (Touvron et al. 2021), in the tables named per row.
``None``: the paper gives no figure for that preset.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class PaperFigures:
    params_m: float  # millions of parameters, as printed (rounded) in the paper
    gflops: float | None  # billions of multiply-adds at 224x224
    source: str


PAPER_FIGURES: dict[str, PaperFigures] = {
    "cait_xxs24": PaperFigures(12.0, 2.5, "CaiT Table 1"),
    "cait_xxs36": PaperFigures(17.3, 3.8, "CaiT Table 1"),
    "cait_xs24": PaperFigures(26.6, 5.4, "CaiT Table 1"),
    "cait_s24": PaperFigures(46.9, 9.4, "CaiT Table 1"),
    "cait_s36": PaperFigures(68.2, 13.9, "CaiT Table 1"),
    "cait_m24": PaperFigures(185.9, 36.0, "CaiT Table 1"),
    "cait_m36": PaperFigures(270.9, None, "CaiT Table 1"),
    "deit_s": PaperFigures(22.0, 4.6, "DeiT Table 1"),
    "coatnet_0": PaperFigures(25.0, 4.2, "CoAtNet Table 3"),
    "coatnet_1": PaperFigures(42.0, 8.4, "CoAtNet Table 3"),
    "coatnet_2": PaperFigures(75.0, 15.7, "CoAtNet Table 3"),
    "coatnet_3": PaperFigures(168.0, 34.7, "CoAtNet Table 3"),
    "coatnet_4": PaperFigures(275.0, None, "CoAtNet Table 3"),
}


def paper_gflops() -> dict[str, float]:
    """Preset -> the paper's GFLOPs at 224, for the presets the papers give one for."""
    return {name: f.gflops for name, f in PAPER_FIGURES.items() if f.gflops is not None}
