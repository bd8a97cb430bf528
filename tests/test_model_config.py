"""Model configurations: validation errors name the field; presets, overrides and round trips."""

from __future__ import annotations

import pytest

from trials.models import (
    PRESETS,
    CaiTConfig,
    CoAtNetConfig,
    ModelConfigError,
    config_from_dict,
    paper_layer_scale_init,
    resolve_config,
)
from trials.models.config import drop_path_rates, normalize_layout


@pytest.mark.parametrize(
    ("factory", "field", "fragment"),
    [
        (lambda: CaiTConfig(embed_dim=100, num_heads=8), "CaiTConfig.embed_dim", "not divisible by num_heads 8"),
        (lambda: CaiTConfig(image_size=225), "CaiTConfig.image_size", "not divisible by patch_size 16"),
        (lambda: CaiTConfig(depth=0), "CaiTConfig.depth", "positive integer"),
        (lambda: CaiTConfig(ca_depth=-1), "CaiTConfig.ca_depth", "non-negative"),
        (lambda: CaiTConfig(layer_scale="sometimes"), "CaiTConfig.layer_scale", "must be one of"),
        (lambda: CaiTConfig(layer_scale=-0.1), "CaiTConfig.layer_scale", "positive float"),
        (lambda: CaiTConfig(drop_path_rate=1.5), "CaiTConfig.drop_path_rate", "[0, 1)"),
        (lambda: CaiTConfig(drop_path_schedule="cubic"), "CaiTConfig.drop_path_schedule", "uniform, linear"),
        (lambda: CaiTConfig(cls_insert_layer=30), "CaiTConfig.cls_insert_layer", "past the last"),
        (lambda: CaiTConfig(ca_depth=0), "CaiTConfig.cls_insert_layer", "nothing ever updates it"),
        (lambda: CaiTConfig(mlp_ratio=0), "CaiTConfig.mlp_ratio", "positive number"),
        (lambda: CoAtNetConfig(layout="CTCT"), "CoAtNetConfig.layout", "convolution stage after a Transformer"),
        (lambda: CoAtNetConfig(layout="CCT"), "CoAtNetConfig.layout", "not a layout"),
        (lambda: CoAtNetConfig(layout="CCXT"), "CoAtNetConfig.layout", "not a layout"),
        (lambda: CoAtNetConfig(image_size=200), "CoAtNetConfig.image_size", "total stride"),
        (lambda: CoAtNetConfig(dims=(64, 96, 192, 400, 768)), "CoAtNetConfig.dims[3]", "head_size 32"),
        (lambda: CoAtNetConfig(depths=(2, 2, 3, 5)), "CoAtNetConfig.depths", "5 entries"),
        (lambda: CoAtNetConfig(depths=(2, 2, 0, 5, 2)), "CoAtNetConfig.depths[2]", "positive integer"),
        (lambda: CoAtNetConfig(layout="VIT-REL", image_size=40), "CoAtNetConfig.image_size", "vit_patch_size"),
        (lambda: CoAtNetConfig(mbconv_downsample="avg"), "CoAtNetConfig.mbconv_downsample", "expand, depthwise"),
    ],
)
def test_invalid_configs_name_the_field(factory, field, fragment):
    with pytest.raises(ModelConfigError) as excinfo:
        factory()
    assert excinfo.value.field == field
    assert str(excinfo.value).startswith(field + ": ")
    assert fragment in str(excinfo.value)


def test_layout_strings_are_normalized():
    assert normalize_layout("C-C-T-T") == "CCTT"
    assert normalize_layout("cttt") == "CTTT"
    assert normalize_layout("vit_rel") == "VIT-REL"
    assert normalize_layout("ViT-REL") == "VIT-REL"
    assert CoAtNetConfig(layout="c-c-c-t").layout == "CCCT"


def test_paper_layer_scale_schedule():
    assert paper_layer_scale_init(12) == 0.1
    assert paper_layer_scale_init(18) == 0.1
    assert paper_layer_scale_init(24) == 1e-5
    assert paper_layer_scale_init(36) == 1e-6
    assert CaiTConfig(depth=36, layer_scale="paper").layer_scale_init() == 1e-6
    assert CaiTConfig(layer_scale="off").layer_scale_init() is None
    assert CaiTConfig(layer_scale=0.3).layer_scale_init() == 0.3


def test_drop_path_schedules():
    assert drop_path_rates(0.2, 4, "uniform") == [0.2] * 4
    assert drop_path_rates(0.3, 4, "linear") == pytest.approx([0.0, 0.1, 0.2, 0.3])
    assert drop_path_rates(0.3, 1, "linear") == [0.0]
    assert drop_path_rates(0.3, 0, "linear") == []


def test_official_layer_scale_of_presets():
    # Official CaiT models: XXS/XS/S-24 (and XXS-36) use 1e-5, S-36 and M-36 use 1e-6.
    expected = {"cait_xxs24": 1e-5, "cait_xxs36": 1e-5, "cait_xs24": 1e-5, "cait_s24": 1e-5, "cait_s36": 1e-6}
    expected["cait_m36"] = 1e-6
    for name, value in expected.items():
        assert PRESETS[name].layer_scale_init() == value, name


def test_resolve_config_preset_overrides_and_mappings():
    config = resolve_config("coatnet_0", layout="CTTT", drop_path_rate=0.2)
    assert (config.layout, config.drop_path_rate, config.dims) == ("CTTT", 0.2, PRESETS["coatnet_0"].dims)
    from_mapping = resolve_config({"preset": "cait_tiny32", "depth": 4})
    assert from_mapping.depth == 4 and from_mapping.embed_dim == PRESETS["cait_tiny32"].embed_dim
    with pytest.raises(ModelConfigError, match="unknown preset 'cait_huge'"):
        resolve_config("cait_huge")
    with pytest.raises(ModelConfigError, match=r"CaiTConfig.dept: unknown field"):
        resolve_config("cait_xxs24", dept=12)
    with pytest.raises(ModelConfigError, match="family: must be one of cait, coatnet"):
        config_from_dict({"family": "resnet"})
    with pytest.raises(ModelConfigError, match="does not match preset"):
        resolve_config({"preset": "cait_tiny32", "family": "coatnet"})


@pytest.mark.parametrize("name", list(PRESETS))
def test_config_round_trips_through_a_plain_dict(name):
    config = PRESETS[name]
    assert config_from_dict(config.to_dict()) == config
