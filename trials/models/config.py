"""Model configurations as validated data.

One frozen dataclass per family. Validation runs on construction (and therefore on every
``dataclasses.replace``), and each error names the field and the constraint it broke, so a
search space compiled from YAML can point the user at the offending key.

This module imports nothing beyond the standard library: the search space and the
closed-form cost model validate and price configurations without importing torch.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from trials.configio import ConfigError

LayerScaleSpec = float | Literal["paper", "off", "rezero"]
DropPathSchedule = Literal["uniform", "linear"]
TalkingHeadsImpl = Literal["explicit", "fused", "auto"]
InitScheme = Literal["trunc_normal", "xavier", "scaled"]
# How talking heads are computed (trials/models/cait.py, SelfAttention): the same maths and the same
# parameters either way, so a trial's weights load into both; see CaiTConfig's docstring.
TALKING_HEADS_IMPLS: tuple[str, ...] = ("explicit", "fused", "auto")
ResidualScheme = Literal["prenorm", "rezero", "skipinit", "fixup", "t-fixup", "scalar", "layerscale"]
# CaiT Table 1's columns: each scheme's block update and the paper it comes from (equations and
# initialisation in trials/models/residual.py; ``archsearch models --residual-schemes`` prints this).
RESIDUAL_SCHEME_DOCS: dict[str, tuple[str, str]] = {
    "prenorm": ("x + F(LN(x))", "DeiT baseline (Touvron et al. 2021)"),
    "rezero": ("x + a F(x), a = 0, no LayerNorm", "ReZero (Bachlechner et al. 2020)"),
    "skipinit": ("x + a F(x), a = 0 (or eps), no normalisation", "SkipInit (De & Smith 2020)"),
    "fixup": (
        "x + m F(x + b), no normalisation; last layer 0, others x L^-1/2; scalar biases b, multiplier m = 1",
        "Fixup (Zhang et al. 2019)",
    ),
    "t-fixup": ("x + F(x), no LayerNorm; values, outputs, FFN x 0.67 N^-1/4", "T-Fixup (Huang et al. 2020)"),
    "scalar": ("x + a F(LN(x)), a = eps", "CaiT Table 1, alpha = eps (Touvron et al. 2021)"),
    "layerscale": ("x + diag(lambda) F(LN(x)), lambda = eps per channel", "LayerScale (CaiT, Touvron et al. 2021)"),
}
RESIDUAL_SCHEMES: tuple[str, ...] = tuple(RESIDUAL_SCHEME_DOCS)
# Which schemes keep the pre-LayerNorm on each residual branch, and which gain each branch ends with.
NORMALISED_SCHEMES = ("prenorm", "scalar", "layerscale")
SCALAR_GAIN_SCHEMES = ("rezero", "skipinit", "fixup", "scalar")
# How the linear layers of the blocks are initialised (``init:``; trials/models/layers.py, init_weight), each
# with its rule and where it comes from (``archsearch models --init-schemes`` prints this). Left unset, a
# model keeps the initialisation it always had: trunc_normal, except T-Fixup, whose own rule is Xavier.
INIT_SCHEME_DOCS: dict[str, tuple[str, str]] = {
    "trunc_normal": ("truncated normal, std 0.02 (the default)", "ViT/DeiT/CaiT's init, meant for widths 192-768"),
    "xavier": ("uniform, std sqrt(2 / (fan_in + fan_out)); each q, k, v projection on its own fans",
               "Xavier/Glorot (2010), as T-Fixup (Huang et al. 2020) initialises its encoder"),
    "scaled": ("normal, std 1/sqrt(fan_in) (1/sqrt(d) for a d x d projection)", "LeCun-style fan-in scaling"),
}  # fmt: skip
INIT_SCHEMES: tuple[str, ...] = tuple(INIT_SCHEME_DOCS)
DEFAULT_INIT = "trunc_normal"

VIT_REL = "VIT-REL"
STANDARD_LAYOUTS = ("CCCC", "CCCT", "CCTT", "CTTT", VIT_REL)


class ModelConfigError(ConfigError):
    """A model configuration violates a constraint.

    ``field`` is the dotted name of the offending field (``CaiTConfig.embed_dim``) so that
    callers (the search-space compiler, the CLI) can relocate it under their own path.
    """


MAX_LAYER_SCALE = 1e3  # LayerScale's eps: CaiT uses 1e-6..0.1; far above 1 only amplifies the branch


def paper_layer_scale_init(depth: int) -> float:
    """LayerScale init from the CaiT paper's schedule: 0.1 up to 18 blocks, 1e-5 at 24, 1e-6 deeper."""
    if depth <= 18:
        return 0.1
    if depth <= 24:
        return 1e-5
    return 1e-6


def drop_path_rates(rate: float, num_blocks: int, schedule: DropPathSchedule) -> list[float]:
    """Per-block stochastic-depth probabilities.

    CaiT's official code uses the same rate for every block ("uniform"); timm and CoAtNet
    ramp it linearly from 0 at the first block to ``rate`` at the last ("linear").
    """
    if schedule == "uniform":
        return [rate] * num_blocks
    if num_blocks == 1:
        return [0.0]
    return [rate * i / (num_blocks - 1) for i in range(num_blocks)]


def _positive_int(owner: str, name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ModelConfigError(f"{owner}.{name}", f"must be a positive integer, got {value!r}")


def _non_negative_int(owner: str, name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ModelConfigError(f"{owner}.{name}", f"must be a non-negative integer, got {value!r}")


def _probability(owner: str, name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value < 1.0:
        raise ModelConfigError(f"{owner}.{name}", f"must be a number in [0, 1), got {value!r}")


def _one_of(owner: str, name: str, value: Any, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise ModelConfigError(f"{owner}.{name}", f"must be one of {', '.join(allowed)}; got {value!r}")


@dataclass(frozen=True)
class _ConfigBase:
    family: ClassVar[str]

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON/YAML-friendly dict, including the ``family`` tag."""
        out: dict[str, Any] = {"family": self.family}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            out[f.name] = list(value) if isinstance(value, tuple) else value
        return out

    def replace(self, **overrides: Any) -> _ConfigBase:
        """A validated copy with some fields changed (unknown names are an error)."""
        known = {f.name for f in dataclasses.fields(self)}
        for key in overrides:
            if key not in known:
                raise ModelConfigError(
                    f"{type(self).__name__}.{key}",
                    f"unknown field; valid fields are {', '.join(sorted(known))}",
                )
        return dataclasses.replace(self, **overrides)


@dataclass(frozen=True)
class CaiTConfig(_ConfigBase):
    """CaiT (and the DeiT/ViT baseline as a special case).

    ``depth`` self-attention blocks over the patch tokens, then ``ca_depth`` class-attention
    blocks in which only the class token is updated. ``cls_insert_layer`` says where the
    class token joins the patch tokens: ``None`` means after the self-attention stage (CaiT);
    ``0`` gives DeiT/ViT; values in between are the paper's "late insertion" variants.

    ``residual``: how each residual branch is normalised, gated and initialised, CaiT Table 1's
    columns (each scheme's equations and paper are in :mod:`trials.models.residual`):
    ``prenorm`` (DeiT: x + F(LN(x))), ``rezero`` (x + a F(x), a = 0, no LayerNorm), ``skipinit``
    (x + a F(x), a = eps or 0, no normalisation), ``fixup`` (no normalisation, scalar biases and
    multiplier, last layer of each branch at zero, the others scaled by L^(-1/2)), ``t-fixup`` (no
    LayerNorm, value/output/FFN weights scaled by 0.67 N^(-1/4)), ``scalar`` (x + a F(LN(x)), one
    a = eps per branch) and ``layerscale`` (x + diag(lambda) F(LN(x)), lambda = eps per channel).
    Left unset, the scheme follows ``layer_scale`` as it always has: a float or ``"paper"`` is
    ``layerscale``, ``"off"`` is ``prenorm``, ``"rezero"`` is ``scalar`` with eps = 0.

    ``layer_scale``: eps, for the schemes that have one (``layerscale``, ``scalar``, ``skipinit``):
    a float, ``"paper"`` (the paper's depth schedule: 0.1 up to depth 18, 1e-5 at 24, 1e-6
    deeper), ``"off"`` or ``"rezero"`` (eps = 0). The other schemes do not read it. The final
    LayerNorm before the head stays in every scheme: it normalises the head's input only and lies
    on no residual path.

    ``talking_heads_impl``: how talking heads are computed, never what (the same parameters and
    state_dict, equal outputs to float tolerance). ``"explicit"`` materialises the N x N logits and
    mixes heads with two batched matmuls; ``"fused"`` folds the pre-softmax head mix into the
    queries so fused attention (SDPA) applies, at H times the attention matmuls' multiply-adds but
    no N x N tensor in memory; ``"auto"`` is fused on CUDA and explicit elsewhere. The default stays
    ``"explicit"`` until a GPU run of ``benchmarks.gpu`` (part (a), part (t)) shows the fused path
    faster. FLOPs (fvcore and the cost model) count the explicit path whichever is chosen: the
    architecture's cost, not an implementation's.

    ``init``: how the blocks' linear layers (self- and class-attention projections, FFNs) are drawn:
    ``"trunc_normal"`` (std 0.02, ViT/CaiT's), ``"xavier"`` (Glorot uniform, each of the query, key and
    value projections on its own d x d fans, as T-Fixup does) or ``"scaled"`` (normal, std
    1/sqrt(fan_in)). The patch projection, embeddings, talking-heads mixes and the classification head
    keep their own initialisation under every choice (the head as T-Fixup keeps it). Left unset
    (``None``), the scheme's own: Xavier for ``t-fixup`` (its paper's rule, applied before its
    scaling), trunc_normal for every other, so every model built before this option is unchanged bit for
    bit; ``t-fixup`` refuses any other value. The residual scheme's own rules (Fixup's zeros and
    L^-1/2, T-Fixup's 0.67 N^-1/4) apply on top. ``init_scheme`` is the value in force.
    """

    family: ClassVar[str] = "cait"

    image_size: int = 224
    patch_size: int = 16
    in_chans: int = 3
    num_classes: int = 1000
    embed_dim: int = 192
    depth: int = 24
    num_heads: int = 4
    ca_depth: int = 2
    mlp_ratio: float = 4.0
    qkv_bias: bool = True
    talking_heads: bool = True
    talking_heads_impl: TalkingHeadsImpl = "explicit"
    layer_scale: LayerScaleSpec = "paper"
    drop_path_rate: float = 0.0
    drop_path_schedule: DropPathSchedule = "uniform"
    cls_insert_layer: int | None = None
    residual: ResidualScheme | None = None
    # Keep the pre-LayerNorm on each branch for a scheme that drops it (rezero, skipinit, fixup,
    # t-fixup): CaiT's own versions of these (section 3, Table A.1: "Rezero with LayerNorm and
    # warmup"), which it re-normalised because the originals trained unstably at depth.
    keep_norm: bool = False
    init: InitScheme | None = None

    def __post_init__(self) -> None:
        """
        Long because it validates every field of the model config in declaration order, one rule each, naming the
        first bad key.
        """
        owner = type(self).__name__
        for name in (
            "image_size",
            "patch_size",
            "in_chans",
            "num_classes",
            "embed_dim",
            "depth",
            "num_heads",
        ):
            _positive_int(owner, name, getattr(self, name))
        _non_negative_int(owner, "ca_depth", self.ca_depth)
        if self.image_size % self.patch_size:
            raise ModelConfigError(
                f"{owner}.image_size",
                f"{self.image_size} is not divisible by patch_size {self.patch_size}",
            )
        if self.embed_dim % self.num_heads:
            raise ModelConfigError(
                f"{owner}.embed_dim", f"{self.embed_dim} is not divisible by num_heads {self.num_heads}"
            )
        if isinstance(self.mlp_ratio, bool) or not isinstance(self.mlp_ratio, (int, float)) or self.mlp_ratio <= 0:
            raise ModelConfigError(f"{owner}.mlp_ratio", f"must be a positive number, got {self.mlp_ratio!r}")
        if round(self.embed_dim * self.mlp_ratio) < 1:
            raise ModelConfigError(f"{owner}.mlp_ratio", f"{self.mlp_ratio} leaves the FFN with no hidden units")
        if self.layer_scale is False:  # YAML 1.1 reads a bare `off` as false
            object.__setattr__(self, "layer_scale", "off")
        ls = self.layer_scale
        if isinstance(ls, str):
            _one_of(owner, "layer_scale", ls, ("paper", "off", "rezero"))
        elif isinstance(ls, bool) or not isinstance(ls, (int, float)) or not (0.0 < ls < math.inf):
            raise ModelConfigError(
                f"{owner}.layer_scale", f"must be a positive float, 'paper', 'off' or 'rezero'; got {ls!r}"
            )
        elif ls > MAX_LAYER_SCALE:  # 1e300 passed once and overflowed float32 at build time
            why = f"{ls!r} is above {MAX_LAYER_SCALE:g}: eps scales a residual branch (CaiT: 1e-6..0.1)"
            raise ModelConfigError(f"{owner}.layer_scale", why)
        _probability(owner, "drop_path_rate", self.drop_path_rate)
        _one_of(owner, "talking_heads_impl", self.talking_heads_impl, TALKING_HEADS_IMPLS)
        _one_of(owner, "drop_path_schedule", self.drop_path_schedule, ("uniform", "linear"))
        if self.residual is not None:
            _one_of(owner, "residual", self.residual, RESIDUAL_SCHEMES)
            if self.residual == "layerscale" and ls in ("off", "rezero"):
                raise ModelConfigError(
                    f"{owner}.layer_scale",
                    f"residual 'layerscale' needs a per-channel eps (a positive float or 'paper'); got {ls!r}",
                )
            if self.residual == "scalar" and ls == "off":
                raise ModelConfigError(
                    f"{owner}.layer_scale", "residual 'scalar' needs its eps (a float, 'paper' or 'rezero'); got 'off'"
                )
        if not isinstance(self.keep_norm, bool):
            raise ModelConfigError(f"{owner}.keep_norm", f"must be true or false, got {self.keep_norm!r}")
        if self.init is not None:
            _one_of(owner, "init", self.init, INIT_SCHEMES)
            if self.residual_scheme == "t-fixup" and self.init != "xavier":
                raise ModelConfigError(
                    f"{owner}.init",
                    f"residual 't-fixup' initialises its encoder with Xavier (its paper's rule, before its "
                    f"0.67 N^-1/4 scaling); leave init unset or 'xavier', got {self.init!r}",
                )
        if self.keep_norm and self.residual_scheme in NORMALISED_SCHEMES:
            raise ModelConfigError(
                f"{owner}.keep_norm",
                f"residual {self.residual_scheme!r} keeps its LayerNorm already; keep_norm is for the schemes "
                f"that drop it ({', '.join(s for s in RESIDUAL_SCHEMES if s not in NORMALISED_SCHEMES)})",
            )
        if self.cls_insert_layer is not None:
            _non_negative_int(owner, "cls_insert_layer", self.cls_insert_layer)
            if self.cls_insert_layer > self.depth:
                raise ModelConfigError(
                    f"{owner}.cls_insert_layer",
                    f"{self.cls_insert_layer} is past the last self-attention block (depth {self.depth})",
                )
        if self.ca_depth == 0 and self.class_token_layer >= self.depth:
            raise ModelConfigError(
                f"{owner}.cls_insert_layer",
                "with ca_depth 0 the class token must join a self-attention block "
                f"(cls_insert_layer < depth {self.depth}), otherwise nothing ever updates it",
            )

    @property
    def num_patches(self) -> int:
        return (self.image_size // self.patch_size) ** 2

    @property
    def head_dim(self) -> int:
        return self.embed_dim // self.num_heads

    @property
    def mlp_hidden_dim(self) -> int:
        return round(self.embed_dim * self.mlp_ratio)

    @property
    def class_token_layer(self) -> int:
        """Index of the self-attention block the class token first enters (``depth``: none)."""
        return self.depth if self.cls_insert_layer is None else self.cls_insert_layer

    @property
    def residual_scheme(self) -> str:
        """The residual scheme in force: ``residual``, or the one ``layer_scale`` implies when unset."""
        if self.residual is not None:
            return self.residual
        if self.layer_scale == "off":
            return "prenorm"
        return "scalar" if self.layer_scale == "rezero" else "layerscale"

    def _eps(self) -> float:
        if self.layer_scale == "paper":
            return paper_layer_scale_init(self.depth)
        if self.layer_scale in ("off", "rezero"):
            return 0.0
        return float(self.layer_scale)

    def layer_scale_init(self) -> float | None:
        """Per-channel LayerScale init (eps), or None when the scheme has no per-channel gain."""
        return self._eps() if self.residual_scheme == "layerscale" else None

    def residual_gain(self) -> tuple[str, float] | None:
        """The gain each residual branch ends with: ("channel", eps), ("scalar", init), or None.

        ReZero's scalar starts at 0, SkipInit's at eps when ``layer_scale`` is a float (else 0),
        Fixup's multiplier at 1, the scalar scheme's at eps.
        """
        scheme = self.residual_scheme
        if scheme == "layerscale":
            return ("channel", self._eps())
        if scheme == "rezero":
            return ("scalar", 0.0)
        if scheme == "skipinit":
            is_float = not isinstance(self.layer_scale, str)
            return ("scalar", float(self.layer_scale) if is_float else 0.0)
        if scheme == "fixup":
            return ("scalar", 1.0)
        if scheme == "scalar":
            return ("scalar", self._eps())
        return None

    @property
    def init_scheme(self) -> str:
        """The initialisation in force: ``init``, or the scheme's own when unset (Xavier for T-Fixup)."""
        if self.init is not None:
            return self.init
        return "xavier" if self.residual_scheme == "t-fixup" else DEFAULT_INIT

    @property
    def branch_norm(self) -> bool:
        """Whether each residual branch starts with a LayerNorm (pre-norm, DeiT and CaiT; CaiT's own
        versions of the schemes that drop it, with ``keep_norm``)."""
        return self.residual_scheme in NORMALISED_SCHEMES or self.keep_norm

    @property
    def num_residual_branches(self) -> int:
        """L in Fixup's rescaling: two branches (attention, FFN) per block, class attention included."""
        return 2 * (self.depth + self.ca_depth)

    def block_drop_path_rates(self) -> list[float]:
        return drop_path_rates(self.drop_path_rate, self.depth, self.drop_path_schedule)


@dataclass(frozen=True)
class CoAtNetConfig(_ConfigBase):
    """CoAtNet: a conv stem S0 and four stages S1..S4 at strides 4, 8, 16, 32.

    ``depths`` and ``dims`` have five entries, S0..S4 as in the paper's tables (S0's depth is
    the number of stem convolutions). ``layout`` gives the block type of S1..S4 (``C``: MBConv,
    ``T``: relative-attention Transformer), e.g. ``"CCTT"``; convolution stages must come
    first. ``"VIT-REL"`` is the paper's ViT baseline with relative attention: a
    ``vit_patch_size`` patchify stem, then ``sum(depths[1:])`` Transformer blocks at S3's width
    (the stride-16 stage) with no further downsampling.

    ``mbconv_downsample``: where an MBConv stage's first block strides. ``"expand"`` is the
    paper's default (stride in the first 1x1 convolution, so the depthwise conv runs at the
    lower resolution); ``"depthwise"`` is timm's variant (the costlier one in the paper's Table 9).

    ``init``: how the Transformer blocks' linear layers (relative attention's qkv, each of q, k, v on
    its own fans, its output projection, the shortcut projection, the FFN) are drawn, as CaiT's
    ``init``; MBConv's convolutions (Kaiming), the relative-position bias and the head keep theirs.
    Unset (``None``): ``"trunc_normal"``, the initialisation every model had before this option.
    """

    family: ClassVar[str] = "coatnet"

    image_size: int = 224
    in_chans: int = 3
    num_classes: int = 1000
    layout: str = "CCTT"
    depths: tuple[int, ...] = (2, 2, 3, 5, 2)
    dims: tuple[int, ...] = (64, 96, 192, 384, 768)
    head_size: int = 32
    mlp_ratio: float = 4.0
    expansion: int = 4
    se_ratio: float = 0.25
    head_hidden_dim: int | None = None
    drop_path_rate: float = 0.0
    drop_path_schedule: DropPathSchedule = "linear"
    mbconv_downsample: Literal["expand", "depthwise"] = "expand"
    vit_patch_size: int = 16
    init: InitScheme | None = None

    def __post_init__(self) -> None:
        owner = type(self).__name__
        object.__setattr__(self, "layout", normalize_layout(self.layout, f"{owner}.layout"))
        for name in ("depths", "dims"):
            value = getattr(self, name)
            if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple)):
                raise ModelConfigError(f"{owner}.{name}", f"must be a list of 5 positive integers, got {value!r}")
            object.__setattr__(self, name, tuple(value))
        for name in ("image_size", "in_chans", "num_classes", "head_size", "expansion", "vit_patch_size"):
            _positive_int(owner, name, getattr(self, name))
        for name in ("depths", "dims"):
            values = getattr(self, name)
            if len(values) != 5:
                raise ModelConfigError(
                    f"{owner}.{name}", f"needs 5 entries (stages S0..S4), got {len(values)}: {list(values)}"
                )
            for i, v in enumerate(values):
                _positive_int(owner, f"{name}[{i}]", v)
        if self.head_hidden_dim is not None:
            _positive_int(owner, "head_hidden_dim", self.head_hidden_dim)
        if isinstance(self.mlp_ratio, bool) or not isinstance(self.mlp_ratio, (int, float)) or self.mlp_ratio <= 0:
            raise ModelConfigError(f"{owner}.mlp_ratio", f"must be a positive number, got {self.mlp_ratio!r}")
        if (
            isinstance(self.se_ratio, bool)
            or not isinstance(self.se_ratio, (int, float))
            or not 0 <= self.se_ratio <= 1
        ):
            raise ModelConfigError(f"{owner}.se_ratio", f"must be a number in [0, 1], got {self.se_ratio!r}")
        _probability(owner, "drop_path_rate", self.drop_path_rate)
        _one_of(owner, "drop_path_schedule", self.drop_path_schedule, ("uniform", "linear"))
        _one_of(owner, "mbconv_downsample", self.mbconv_downsample, ("expand", "depthwise"))
        if self.init is not None:
            _one_of(owner, "init", self.init, INIT_SCHEMES)
        if self.is_vit_rel:
            if self.image_size % self.vit_patch_size:
                raise ModelConfigError(
                    f"{owner}.image_size",
                    f"{self.image_size} is not divisible by vit_patch_size {self.vit_patch_size}",
                )
            if self.dims[3] % self.head_size:
                raise ModelConfigError(
                    f"{owner}.dims[3]", f"{self.dims[3]} is not divisible by head_size {self.head_size}"
                )
            return
        if self.image_size % 32:
            raise ModelConfigError(
                f"{owner}.image_size",
                f"{self.image_size} is not divisible by 32, the total stride of stages S0..S4",
            )
        for stage, kind in enumerate(self.layout, start=1):
            if kind == "T" and self.dims[stage] % self.head_size:
                raise ModelConfigError(
                    f"{owner}.dims[{stage}]",
                    f"{self.dims[stage]} (a Transformer stage) is not divisible by head_size {self.head_size}",
                )

    @property
    def init_scheme(self) -> str:
        """The initialisation in force: ``init``, or trunc_normal when unset."""
        return self.init if self.init is not None else DEFAULT_INIT

    @property
    def is_vit_rel(self) -> bool:
        return self.layout == VIT_REL

    def stage_resolutions(self) -> list[int]:
        """Spatial side of the feature map after S1..S4 (after the stem for VIT-REL)."""
        if self.is_vit_rel:
            return [self.image_size // self.vit_patch_size]
        return [self.image_size // 2 ** (s + 1) for s in range(1, 5)]

    def num_blocks(self) -> int:
        return sum(self.depths[1:])

    def block_drop_path_rates(self) -> list[float]:
        return drop_path_rates(self.drop_path_rate, self.num_blocks(), self.drop_path_schedule)


ModelConfig = CaiTConfig | CoAtNetConfig
CONFIG_CLASSES: dict[str, type[_ConfigBase]] = {"cait": CaiTConfig, "coatnet": CoAtNetConfig}


def normalize_layout(layout: Any, where: str = "layout") -> str:
    """Canonical layout string: ``"C-C-T-T"``/``"cctt"`` -> ``"CCTT"``, ``"vit_rel"`` -> ``"VIT-REL"``."""
    if not isinstance(layout, str):
        raise ModelConfigError(where, f"must be a string such as 'CCTT' or 'VIT-REL', got {layout!r}")
    text = layout.strip().upper().replace("_", "-")
    if text in (VIT_REL, "VITREL"):
        return VIT_REL
    compact = text.replace("-", "")
    if len(compact) != 4 or set(compact) - {"C", "T"}:
        raise ModelConfigError(
            where,
            f"{layout!r} is not a layout: use 4 stage letters C (MBConv) / T (Transformer), "
            f"e.g. {', '.join(STANDARD_LAYOUTS)}",
        )
    if "TC" in compact:
        raise ModelConfigError(
            where, f"{layout!r} puts a convolution stage after a Transformer stage; C stages must come first"
        )
    return compact


def config_from_dict(data: Mapping[str, Any]) -> ModelConfig:
    """Build a config from a plain mapping with a ``family`` key (as written in YAML)."""
    if not isinstance(data, Mapping):
        raise ModelConfigError("model", f"must be a mapping with a 'family' key, got {type(data).__name__}")
    values = dict(data)
    family = values.pop("family", None)
    if not isinstance(family, str) or family not in CONFIG_CLASSES:
        raise ModelConfigError("family", f"must be one of {', '.join(CONFIG_CLASSES)}; got {family!r}")
    cls = CONFIG_CLASSES[family]
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(values) - known)
    if unknown:
        raise ModelConfigError(
            f"{cls.__name__}.{unknown[0]}", f"unknown field; valid fields are {', '.join(sorted(known))}"
        )
    for key in ("depths", "dims"):
        if key in values and isinstance(values[key], list):
            values[key] = tuple(values[key])
    return cls(**values)  # type: ignore[return-value]


__all__ = [
    "CONFIG_CLASSES",
    "DEFAULT_INIT",
    "INIT_SCHEMES",
    "INIT_SCHEME_DOCS",
    "RESIDUAL_SCHEMES",
    "RESIDUAL_SCHEME_DOCS",
    "STANDARD_LAYOUTS",
    "VIT_REL",
    "CaiTConfig",
    "CoAtNetConfig",
    "ModelConfig",
    "ModelConfigError",
    "config_from_dict",
    "drop_path_rates",
    "normalize_layout",
    "paper_layer_scale_init",
]
