"""Regional compilation: torch.compile each repeated block, not the whole model.

Compiling the whole model unrolls every block into one graph, so compile time grows with depth
(a 24-block CaiT traced whole took 37 s of Dynamo + AOTAutograd on a CPU here, one block 8 s),
and two models that differ only in depth share nothing. Compiling per block (PyTorch's "regional
compilation" recipe) traces a block's ``forward`` once: with ``inline_inbuilt_nn_modules`` (on by
default since torch 2.5) parameters are graph inputs, so every block of the same class and shape
reuses one graph, and a depth-12 and a depth-24 model of the same width share it. The stem, the
token bookkeeping and the head stay eager; they are a few ops per step.

Shapes are static (``dynamic=False``): a batch-1 latency measurement compiles its own graph
instead of switching the training graph to a symbolic batch size.

What does not share: blocks whose shapes differ (CoAtNet's stages), and blocks whose drop-path rates
differ (CoAtNet's rates rise linearly block by block, and Dynamo specialises on the rate, a Python
float); CaiT's rate is the same in every block, so its self-attention blocks share one graph.
Every block runs one code object (``nn.Module._call_impl``), so all compiled variants (blocks x
shapes x train/no-grad) count against Dynamo's per-code-object ``recompile_limit`` together:
:func:`variants_needed` sizes it, so that no block silently falls back to eager.
"""

from __future__ import annotations

from torch import nn

from trials.devices.torch_internals import set_compiled_call
from trials.models.cait import ClassAttentionBlock, SelfAttentionBlock
from trials.models.coatnet import MBConvBlock, TransformerBlock

REGION_TYPES: tuple[type[nn.Module], ...] = (SelfAttentionBlock, ClassAttentionBlock, MBConvBlock, TransformerBlock)


def regions(model: nn.Module) -> list[nn.Module]:
    """The repeated blocks of ``model`` that :func:`compile_regions` compiles, in module order."""
    return [module for module in model.modules() if isinstance(module, REGION_TYPES)]


# Compiled variants one block may need in a trial: training at its batch and at a last partial batch,
# no-grad at the measurement batch, batch 1 (latency), the evaluation batch and its last partial batch.
VARIANTS_PER_BLOCK = 6


def variants_needed(model: nn.Module) -> int:
    """A ``recompile_limit`` under which no block of ``model`` falls back to eager.

    ``nn.Module.compile`` compiles the module's ``_call_impl``, one code object for every block of
    every class, and Dynamo counts compiled variants per code object; the worst case is every block
    with its own graph in every variant.
    """
    return VARIANTS_PER_BLOCK * max(len(regions(model)), 1)


def compile_regions(model: nn.Module, *, backend: str = "inductor", mode: str | None = None) -> int:
    """Compile each block of ``model`` in place (``nn.Module.compile``, static shapes).

    Returns how many blocks were set to compile (0: the model has none, nothing changed). The
    model object stays the same, so its ``state_dict`` keys do not gain ``_orig_mod.``.
    """
    blocks = regions(model)
    for block in blocks:
        block.compile(backend=backend, mode=mode, dynamic=False)
    return len(blocks)


def uncompile_regions(model: nn.Module) -> None:
    """Undo :func:`compile_regions`: every block runs its eager ``forward`` again (a compile
    error's fallback); :func:`trials.devices.torch_internals.set_compiled_call` is where torch's field is named."""
    for block in regions(model):
        set_compiled_call(block, None)
