"""The closed-form cost model against the built models: exact parameters, fvcore's FLOPs, the papers."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from search_space.cost_model import COMPONENTS, Cost, estimate_cost, estimate_flops, estimate_params
from trials.measurement.flops import count_flops
from trials.models import (
    PRESETS,
    RESIDUAL_SCHEMES,
    STANDARD_LAYOUTS,
    CaiTConfig,
    CoAtNetConfig,
    build_model,
    preset_parameter_count,
)
from trials.models.paper_figures import paper_gflops

REPO_ROOT = Path(__file__).resolve().parents[1]
LAYOUTS = (*STANDARD_LAYOUTS, "TTTT")
DOWNSAMPLES = ("expand", "depthwise")
FLOP_TOLERANCE = 0.01  # the model is exact today; 1% leaves room for harmless fvcore changes


CAIT_VARIANTS = {
    "talking_heads_off": {"talking_heads": False},
    "layer_scale_off": {"layer_scale": "off"},
    "rezero": {"layer_scale": "rezero"},
    "rezero_proper": {"residual": "rezero"},
    "deit_rezero_proper": {"residual": "rezero", "ca_depth": 0, "cls_insert_layer": 0, "talking_heads": False},
    "layer_scale_float": {"layer_scale": 0.3},
    "no_qkv_bias": {"qkv_bias": False},
    "deit_insert_0": {"ca_depth": 0, "cls_insert_layer": 0},
    "deit_insert_3": {"ca_depth": 0, "cls_insert_layer": 3},
    "late_insert_with_ca": {"cls_insert_layer": 4, "ca_depth": 1},
    "insert_at_depth_with_ca": {"cls_insert_layer": 6, "ca_depth": 2},
    "odd_mlp_ratio": {"mlp_ratio": 2.7, "num_heads": 4},
    **{f"residual_{scheme}": {"residual": scheme} for scheme in RESIDUAL_SCHEMES},
    **{
        f"deit_residual_{scheme}": {"residual": scheme, "ca_depth": 0, "cls_insert_layer": 0, "talking_heads": False}
        for scheme in RESIDUAL_SCHEMES
    },
    "skipinit_at_eps": {"residual": "skipinit", "layer_scale": 0.01},
    "scalar_paper_eps": {"residual": "scalar", "layer_scale": "paper"},
}


def _measured_flops(config: CaiTConfig | CoAtNetConfig, batch_size: int = 1):
    model = build_model(config)
    images = torch.randn(batch_size, config.in_chans, config.image_size, config.image_size)
    return model, count_flops(model, images)


def _assert_flops_match(config: CaiTConfig | CoAtNetConfig) -> None:
    model, measured = _measured_flops(config)
    cost = estimate_cost(config)
    assert measured.unsupported == {}
    assert cost.params == sum(p.numel() for p in model.parameters())
    assert cost.flops == pytest.approx(measured.total, rel=FLOP_TOLERANCE)


# --- parameters: exact, on the meta device ---------------------------------------------------


@pytest.mark.parametrize("name", PRESETS)
def test_params_exact_for_every_preset(name):
    assert estimate_params(PRESETS[name]) == preset_parameter_count(name)


@pytest.mark.parametrize("downsample", DOWNSAMPLES)
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("preset", ["coatnet_0", "coatnet_tiny32"])
def test_params_exact_for_every_coatnet_layout(preset, layout, downsample):
    config = PRESETS[preset].replace(layout=layout, mbconv_downsample=downsample)
    assert estimate_params(config) == preset_parameter_count(config)


def test_params_exact_for_coatnet_head_and_block_options():
    base = PRESETS["coatnet_tiny32"]
    for overrides in (
        {"head_hidden_dim": None},
        {"head_hidden_dim": 50},
        {"se_ratio": 0.0},
        {"expansion": 2, "mlp_ratio": 3.0},
        {"in_chans": 1, "dims": (32, 32, 32, 64, 64)},  # equal widths: no shortcut projections
        {"layout": "VIT-REL", "vit_patch_size": 8},
    ):
        config = base.replace(**overrides)
        assert estimate_params(config) == preset_parameter_count(config), overrides


@pytest.mark.parametrize("overrides", CAIT_VARIANTS.values(), ids=CAIT_VARIANTS.keys())
def test_params_exact_for_cait_variants(overrides):
    config = PRESETS["cait_tiny32"].replace(**overrides)
    assert estimate_params(config) == preset_parameter_count(config)


# --- FLOPs against fvcore (real models; the meta device cannot be traced) ----------------------


@pytest.mark.parametrize("name", ["cait_tiny32", "deit_tiny32"])
def test_flops_match_fvcore_on_tiny_cait_presets(name):
    _assert_flops_match(PRESETS[name])


@pytest.mark.parametrize("overrides", CAIT_VARIANTS.values(), ids=CAIT_VARIANTS.keys())
def test_flops_match_fvcore_on_cait_variants(overrides):
    _assert_flops_match(PRESETS["cait_tiny32"].replace(**overrides))


# Every layout; both MBConv downsampling variants where the layout has an MBConv stage.
TINY_COATNET_CASES = [(layout, ds) for layout in LAYOUTS for ds in DOWNSAMPLES if "C" in layout or ds == "expand"]


@pytest.mark.parametrize(("layout", "downsample"), TINY_COATNET_CASES)
def test_flops_match_fvcore_on_tiny_coatnet_layouts(layout, downsample):
    _assert_flops_match(PRESETS["coatnet_tiny32"].replace(layout=layout, mbconv_downsample=downsample))


@pytest.mark.parametrize("name", ["cait_xxs24", "coatnet_0", "deit_s"])
def test_flops_match_fvcore_at_224(name):
    _assert_flops_match(PRESETS[name])


@pytest.mark.parametrize("name", ["cait_tiny32", "coatnet_tiny32"])
def test_breakdown_matches_fvcore_operators_and_batch_scales(name):
    config = PRESETS[name]
    _, measured = _measured_flops(config, batch_size=2)
    ops = measured.by_operator
    attention_ops = ("scaled_dot_product_attention", "matmul", "baddbmm")
    expected = {
        "conv": ops.get("conv", 0),
        "linear": ops.get("linear", 0),
        "attention": sum(ops.get(op, 0) for op in attention_ops),
        "layer_norm": ops.get("layer_norm", 0),
        "batch_norm": ops.get("batch_norm", 0),
    }
    cost = estimate_cost(config)
    assert set(cost.flops_by_component) == set(COMPONENTS)
    assert {k: 2 * v for k, v in cost.flops_by_component.items()} == expected
    assert sum(cost.flops_by_component.values()) == cost.flops
    assert estimate_flops(config, batch_size=2) == measured.total


# --- random small configurations --------------------------------------------------------------


@st.composite
def cait_configs(draw: st.DrawFn) -> CaiTConfig:
    image_size = draw(st.sampled_from([32, 64]))
    heads = draw(st.integers(1, 4))
    depth = draw(st.integers(1, 4))
    ca_depth = draw(st.integers(0, 2))
    last_insert = depth - 1 if ca_depth == 0 else depth
    cls_insert_layer = draw(st.integers(0, last_insert) if ca_depth == 0 else st.none() | st.integers(0, last_insert))
    residual = draw(st.none() | st.sampled_from(RESIDUAL_SCHEMES))
    needs_eps = {"layerscale": ["paper", 0.5], "scalar": ["paper", "rezero", 0.5]}
    layer_scale = draw(st.sampled_from(needs_eps.get(residual, ["paper", "off", "rezero", 0.5])))
    return CaiTConfig(
        image_size=image_size,
        patch_size=draw(st.sampled_from([8, 16] if image_size == 64 else [4, 8, 16])),
        in_chans=draw(st.integers(1, 3)),
        num_classes=draw(st.integers(1, 20)),
        embed_dim=heads * draw(st.sampled_from([4, 8, 16])),
        depth=depth,
        num_heads=heads,
        ca_depth=ca_depth,
        mlp_ratio=draw(st.sampled_from([1.0, 2.0, 2.5, 4.0])),
        qkv_bias=draw(st.booleans()),
        talking_heads=draw(st.booleans()),
        layer_scale=layer_scale,
        cls_insert_layer=cls_insert_layer,
        residual=residual,
    )


@st.composite
def coatnet_configs(draw: st.DrawFn) -> CoAtNetConfig:
    head_size = draw(st.sampled_from([8, 16]))
    layout = draw(st.sampled_from(LAYOUTS))
    return CoAtNetConfig(
        image_size=draw(st.sampled_from([32, 64])),
        in_chans=draw(st.integers(1, 3)),
        num_classes=draw(st.integers(1, 20)),
        layout=layout,
        depths=tuple(draw(st.integers(1, 2)) for _ in range(5)),
        dims=tuple(head_size * draw(st.integers(1, 3)) for _ in range(5)),
        head_size=head_size,
        mlp_ratio=draw(st.sampled_from([1.0, 2.0, 4.0])),
        expansion=draw(st.integers(1, 4)),
        se_ratio=draw(st.sampled_from([0.0, 0.25, 0.5])),
        head_hidden_dim=draw(st.none() | st.integers(4, 40)),
        mbconv_downsample=draw(st.sampled_from(DOWNSAMPLES)),
        vit_patch_size=draw(st.sampled_from([4, 8, 16])),
    )


_PROPERTY_SETTINGS = settings(
    max_examples=25, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow]
)


@_PROPERTY_SETTINGS
@given(config=cait_configs())
def test_random_cait_configs_match_the_built_model(config):
    _assert_flops_match(config)


@_PROPERTY_SETTINGS
@given(config=coatnet_configs())
def test_random_coatnet_configs_match_the_built_model(config):
    _assert_flops_match(config)


# --- the papers, the API, and staying torch-free ---------------------------------------------


@pytest.mark.parametrize(("name", "gflops"), paper_gflops().items())
def test_flops_within_2_percent_of_papers(name, gflops):
    assert estimate_flops(PRESETS[name]) == pytest.approx(gflops * 1e9, rel=0.02)


def test_api_types_and_errors():
    cost = estimate_cost(PRESETS["cait_tiny32"])
    assert isinstance(cost, Cost) and isinstance(cost.params, int) and isinstance(cost.flops, int)
    assert estimate_flops(PRESETS["cait_tiny32"], batch_size=3) == 3 * cost.flops
    with pytest.raises(ValueError, match="batch_size"):
        estimate_flops(PRESETS["cait_tiny32"], batch_size=0)
    with pytest.raises(TypeError, match="CaiTConfig or CoAtNetConfig"):
        estimate_cost({"family": "cait"})  # type: ignore[arg-type]


def test_import_does_not_import_torch():
    code = "import search_space.cost_model, sys; assert 'torch' not in sys.modules, 'torch was imported'"
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
