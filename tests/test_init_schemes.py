"""The initialisation as a model option (issue 48, deliverable 1): ``init: trunc_normal | xavier | scaled``.

Each scheme's weights have the statistics its formula gives (std of the blocks' linear layers at width
64, within sampling tolerance); the effect the issue names is there (layer-0 attention logits of a
pre-norm DeiT at width 64: std about 0.026 under trunc_normal 0.02, about 1 under Xavier); leaving
``init`` unset builds every model as before the option, bit for bit (the same seed gives the same
state_dict as an explicit ``trunc_normal``, and as the parent commit's code did: the hashes below);
T-Fixup's Xavier is the same option (``init_scheme`` says so) and refuses another; a bad value is refused
naming the key; the option reaches the trial config the store records.
"""

from __future__ import annotations

import hashlib
import math

import pytest
import torch
from torch import nn

from trials.models import INIT_SCHEMES, CaiTConfig, CoAtNetConfig, ModelConfigError, build_model, resolve_config
from trials.models.config import config_from_dict

WIDTH = 64
DEIT = {"preset": "cait_tiny32", "embed_dim": WIDTH, "num_heads": 2, "depth": 4, "ca_depth": 0,
        "cls_insert_layer": 0, "talking_heads": False}  # fmt: skip  # the residual-schemes study's baseline


def _model(seed: int = 0, **overrides):
    torch.manual_seed(seed)
    return build_model(resolve_config({**DEIT, **overrides}))


def _digest(model: nn.Module) -> str:
    h = hashlib.sha256()
    for key, value in model.state_dict().items():
        h.update(key.encode())
        h.update(value.detach().contiguous().numpy().tobytes())
    return h.hexdigest()[:16]


def _expected_std(scheme: str, fan_in: int, fan_out: int) -> float:
    if scheme == "trunc_normal":
        return 0.02  # N(0, 0.02) truncated at +-2 (absolute: 100 std here), so its std is 0.02
    if scheme == "xavier":
        return math.sqrt(2 / (fan_in + fan_out))
    return fan_in**-0.5


@pytest.mark.parametrize("scheme", INIT_SCHEMES)
def test_each_scheme_draws_the_blocks_linear_layers_by_its_formula(scheme):
    model = _model(init=scheme, depth=6)
    qkv = torch.cat([block.attn.qkv.weight for block in model.blocks])  # 6 x (3 x 64 x 64) draws
    fc1 = torch.cat([block.mlp.fc1.weight for block in model.blocks])  # 64 -> 256
    fc2 = torch.cat([block.mlp.fc2.weight for block in model.blocks])  # 256 -> 64
    for weight, fan_in, fan_out in ((qkv, WIDTH, WIDTH), (fc1, WIDTH, 4 * WIDTH), (fc2, 4 * WIDTH, WIDTH)):
        expected = _expected_std(scheme, fan_in, fan_out)
        assert weight.std().item() == pytest.approx(expected, rel=0.03), (scheme, tuple(weight.shape))
        assert weight.mean().abs().item() < 0.03 * expected * 10
    if scheme == "xavier":  # each q, k, v projection on its own d x d fans: uniform on +-sqrt(6 / 2d)
        assert qkv.abs().max().item() <= math.sqrt(6 / (2 * WIDTH)) + 1e-6
    for block in model.blocks:  # biases stay at 0 under every scheme
        assert not block.attn.qkv.bias.any() and not block.mlp.fc1.bias.any()
    assert model.head.weight.std().item() == pytest.approx(0.02, rel=0.2)  # the head keeps its init


def _layer0_logit_std(model: nn.Module, images: torch.Tensor) -> float:
    """Std of the first block's attention logits q.k / sqrt(head_dim) at initialisation."""
    attn = model.blocks[0].attn
    with torch.no_grad():
        x = model.patch_embed(images).flatten(2).transpose(1, 2) + model.pos_embed
        x = torch.cat((model.cls_token.expand(len(images), -1, -1), x), dim=1)
        b, n, _ = x.shape
        q, k, _ = attn.qkv(model.blocks[0].norm1(x)).view(b, n, 3, attn.num_heads, attn.head_dim).permute(2, 0, 3, 1, 4)
        return ((q @ k.transpose(-2, -1)) * attn.head_dim**-0.5).std().item()


def test_layer0_attention_is_near_uniform_under_trunc_normal_and_not_under_xavier():
    """Issue 48 item 2: at width 64, trunc_normal 0.02 leaves pre-norm attention logits at std ~0.026
    (uniform attention); Xavier (T-Fixup's) puts them near 1; 1/sqrt(d) likewise."""
    torch.manual_seed(1)
    images = torch.randn(16, 3, 32, 32)
    stds = {scheme: _layer0_logit_std(_model(init=scheme, residual="prenorm"), images) for scheme in INIT_SCHEMES}
    assert 0.018 < stds["trunc_normal"] < 0.035
    assert 0.7 < stds["xavier"] < 1.4
    assert 0.7 < stds["scaled"] < 1.4
    tfixup = _layer0_logit_std(_model(residual="t-fixup", keep_norm=True), images)
    assert 0.7 < tfixup < 1.4  # T-Fixup+LN's logits: its Xavier on q and k (it scales values, not them)


# state_dict digests of models built with torch.manual_seed(0) by the parent commit (18c002c, before the
# option existed), torch 2.14 on CPU: the default must never draw differently.
BEFORE_THE_OPTION = {
    "cait_tiny32": ({"preset": "cait_tiny32"}, "ae449a4578f26d35"),
    "deit": ({"preset": "cait_tiny32", "ca_depth": 0, "cls_insert_layer": 0, "talking_heads": False, "depth": 4},
             "e43a931e0c846167"),
    "fixup": ({"preset": "cait_tiny32", "residual": "fixup", "depth": 3}, "52e22dfc58744785"),
    "t-fixup": ({"preset": "cait_tiny32", "residual": "t-fixup", "depth": 3}, "69e84eee337bca43"),
    "t-fixup+ln": ({"preset": "cait_tiny32", "residual": "t-fixup", "depth": 3, "keep_norm": True},
                   "4edc0b6da9da091b"),
    "coatnet_tiny32": ({"preset": "coatnet_tiny32"}, "b2d0bc3809a40d76"),
    "vit-rel": ({"preset": "coatnet_tiny32", "layout": "VIT-REL", "image_size": 64}, "e04e45b1cbd217fd"),
}  # fmt: skip


@pytest.mark.parametrize("name", BEFORE_THE_OPTION)
def test_unset_init_builds_the_model_the_parent_commit_built_bit_for_bit(name):
    overrides, digest = BEFORE_THE_OPTION[name]
    torch.manual_seed(0)
    assert _digest(build_model(resolve_config(overrides))) == digest


@pytest.mark.parametrize(
    "overrides",
    [{}, {"residual": "layerscale", "layer_scale": "paper"}, {"residual": "fixup", "keep_norm": True},
     {"residual": "rezero"}, {"preset": "cait_tiny32"}],
)  # fmt: skip
def test_the_default_is_trunc_normal_explicitly_the_same_draws(overrides):
    unset = _model(3, **overrides)
    explicit = _model(3, **overrides, init="trunc_normal")
    assert _digest(unset) == _digest(explicit)
    assert _digest(_model(3, **overrides, init="xavier")) != _digest(unset)


def test_t_fixup_initialises_with_the_same_xavier_option_and_refuses_another():
    assert CaiTConfig(residual="t-fixup").init_scheme == "xavier"
    assert CaiTConfig(residual="prenorm").init_scheme == "trunc_normal"
    assert _digest(_model(5, residual="t-fixup")) == _digest(_model(5, residual="t-fixup", init="xavier"))
    for other in ("trunc_normal", "scaled"):
        with pytest.raises(ModelConfigError, match=r"CaiTConfig\.init.*t-fixup.*Xavier"):
            CaiTConfig(residual="t-fixup", init=other)


@pytest.mark.parametrize("family", ["cait", "coatnet"])
def test_a_bad_init_is_refused_naming_the_key(family):
    with pytest.raises(ModelConfigError) as error:
        config_from_dict({"family": family, "init": "kaiming"})
    assert error.value.field == f"{'CaiTConfig' if family == 'cait' else 'CoAtNetConfig'}.init"
    assert "trunc_normal, xavier, scaled" in str(error.value)


def test_coatnet_transformer_linears_follow_init_and_its_convolutions_do_not():
    def build(init):
        torch.manual_seed(0)
        return build_model(CoAtNetConfig(image_size=64, layout="CTTT", depths=(2, 1, 2, 2, 1),
                                         dims=(32, 32, 64, 128, 128), num_classes=10, init=init))  # fmt: skip

    base, xavier = build(None), build("xavier")
    assert CoAtNetConfig().init_scheme == "trunc_normal"
    assert _digest(base) == _digest(build("trunc_normal"))
    for a, b in zip(base.conv_stages.parameters(), xavier.conv_stages.parameters(), strict=True):
        assert torch.equal(a, b)  # MBConv (Kaiming convolutions, SE) untouched
    assert torch.equal(base.head.weight, xavier.head.weight)
    block = xavier.transformer_blocks[-1]  # 128 wide, 4 heads of 32: qkv 3 x (128 x 128)
    assert block.attn.qkv.weight.std().item() == pytest.approx(math.sqrt(2 / 256), rel=0.05)
    assert base.transformer_blocks[-1].attn.qkv.weight.std().item() == pytest.approx(0.02, rel=0.05)


def test_the_init_option_reaches_the_trial_config_the_store_records():
    from trials.config.trial_config import load_trial_config

    raw = {"model": {**DEIT, "init": "xavier"}, "data": {"name": "synthetic", "train_size": 64, "val_size": 64,
                                                          "num_classes": 10}}  # fmt: skip
    config = load_trial_config(raw)
    assert config.model.init == "xavier" and config.model.to_dict()["init"] == "xavier"
    assert config.to_dict()["model"]["init"] == "xavier"  # the dict a trial stores (config.model.init)
    assert resolve_config(DEIT).to_dict()["init"] is None  # unset: recorded as unset, the scheme's own


def test_the_models_listing_names_each_presets_init_and_the_schemes():
    import json

    from click.testing import CliRunner

    from harness.cli import main

    listing = CliRunner().invoke(main, ["models", "--format", "json"])
    assert listing.exit_code == 0, listing.output
    assert {row["init"] for row in json.loads(listing.output)} == {"trunc_normal"}
    schemes = CliRunner().invoke(main, ["models", "--init-schemes", "--format", "json"])
    assert [row["init"] for row in json.loads(schemes.output)] == list(INIT_SCHEMES)
