"""Cross-check against timm (a test-only reference): the same weights give the same outputs.

timm's CaiT follows the official code, so loading its weights into ours and comparing logits
checks the whole forward pass: talking heads, LayerScale, class attention, norms and head.
"""

from __future__ import annotations

import pytest
import timm
import torch

from trials.models import build_model


def _timm_cait_state_to_ours(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    ours: dict[str, torch.Tensor] = {}
    for name, value in state.items():
        new = name.replace("patch_embed.proj.", "patch_embed.").replace("blocks_token_only.", "ca_blocks.")
        new = new.replace("attn.proj_l.", "attn.mix_logits.").replace("attn.proj_w.", "attn.mix_weights.")
        new = new.replace("gamma_1", "ls1.gamma").replace("gamma_2", "ls2.gamma")
        if ".attn.k." in new or ".attn.v." in new:
            continue
        ours[new] = value
    for name in state:
        if ".attn.k." in name:
            key = name.replace("blocks_token_only.", "ca_blocks.").replace(".attn.k.", ".attn.kv.")
            ours[key] = torch.cat((state[name], state[name.replace(".attn.k.", ".attn.v.")]))
    return ours


def test_cait_matches_timm_output_with_the_same_weights():
    reference = timm.models.cait.Cait(
        img_size=32, patch_size=4, num_classes=10, embed_dim=96, depth=3, num_heads=3, init_values=0.1
    ).eval()
    with torch.no_grad():  # non-trivial LayerScale gains and head mixing, so every path matters
        for name, p in reference.named_parameters():
            if "gamma" in name or "proj_l" in name or "proj_w" in name:
                p.normal_(0.0, 0.5)
    ours = build_model("cait_tiny32", depth=3, layer_scale=0.1).eval()
    missing, unexpected = ours.load_state_dict(_timm_cait_state_to_ours(reference.state_dict()), strict=True)
    assert not missing and not unexpected
    images = torch.randn(4, 3, 32, 32)
    with torch.no_grad():
        assert torch.allclose(ours(images), reference(images), atol=1e-5)


@pytest.mark.parametrize(("ours", "theirs"), [("cait_xxs24", "cait_xxs24_224"), ("coatnet_0", "coatnet_0_224")])
def test_same_parameter_count_as_timm(ours, theirs):
    with torch.device("meta"):
        a = sum(p.numel() for p in build_model(ours).parameters())
        b = sum(p.numel() for p in timm.create_model(theirs).parameters())
    assert a == b
