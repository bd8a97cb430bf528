"""Trials compile static and regional (issue 47, deliverable 1), and CUDA graphs only where they pay.

* A compiled CPU trial with Inductor, its cost measured at its batch and at batch 1, makes exactly
  the graphs its blocks need (one per distinct block per shape and grad mode: nothing symbolic in
  the batch) and recompiles nothing in later epochs; the count is the trial's own record.
* ``compile_scope: whole`` compiles the model as one graph per shape and mode, also static.
* The CUDA-graphs rule (``choose_compile``) is a pure function of the trial: taken on one CUDA
  process with small images (``auto``) or when asked (``true``), never on the CPU or across
  processes (said in the notes when asked); the stubbed CUDA trial passes ``reduce-overhead`` to
  torch.compile exactly then.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from test_gpu_training import tiny  # the same tiny CaiT trial as the GPU training tests

from trials.compilation import compiled_forward
from trials.compilation.compiled_forward import REDUCE_OVERHEAD, CompilePlan, choose_compile
from trials.config.trial_config import load_trial_config
from trials.configio import ConfigError
from trials.runner import run_trial


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch.compiler.reset()
    yield
    torch.compiler.reset()


def _measured(training: dict, **changes) -> dict:
    """The tiny trial, its cost measured at its batch (32) and at batch 1, evaluated at 64."""
    config = tiny(training, **changes)
    config["measure"] = {"latency": True, "throughput": True, "flops": False, "batch_size": 32, "repeats": 1}
    return config


@pytest.mark.slow
def test_an_inductor_trial_compiles_each_block_once_per_shape_and_recompiles_nothing():
    result = run_trial(_measured({"compile": True, "compile_backend": "inductor", "epochs": 3}, cpus=1))
    assert result.status == "completed", result.error
    # Two block classes (self- and class-attention, one graph each, shared by their blocks), each at:
    # no-grad batch 32 (cost), no-grad batch 1 (latency), training batch 32, evaluation batch 64.
    # A batch size made symbolic by the latency run would have merged the batch-32 and batch-64 graphs.
    assert result.final["compiled_graphs"] == 2 * 4
    assert result.final["recompiles"] == 0 and result.final["regional_compile"] == 1.0
    assert result.final["cuda_graphs"] == 0.0 and not result.notes


def test_regional_graphs_do_not_grow_with_depth():
    """Depth 1 and depth 4 compile the same graphs: one self-attention graph, and two class-attention
    graphs (the first class-attention block reads the class token broadcast from the parameter, a
    stride-0 tensor; the second a computed one), each for training and for evaluation."""

    def graphs(depth: int) -> tuple[float, float]:
        model = {"preset": "cait_tiny32", "depth": depth, "embed_dim": 32, "num_heads": 2, "ca_depth": 2}
        result = run_trial(tiny({"compile": True, "compile_backend": "eager"}, model=model))
        assert result.status == "completed", result.error
        return result.final["compiled_graphs"], result.final["recompiles"]

    assert graphs(1) == graphs(4) == (6, 0)


def test_whole_model_compilation_is_one_static_graph_per_shape_and_mode():
    result = run_trial(_measured({"compile": True, "compile_backend": "eager", "compile_scope": "whole"}))
    assert result.status == "completed", result.error
    assert result.final["compiled_graphs"] == 4  # cost at 32, latency at 1, training at 32, evaluation at 64
    assert result.final["regional_compile"] == 0.0 and result.final["recompiles"] == 0


def test_a_shape_met_only_after_the_first_epoch_is_counted_as_a_recompile(monkeypatch):
    """The counter can see a recompile: an evaluation batch that changes size after epoch 1."""
    from trials.training import evaluation

    real = evaluation.evaluate
    calls = []

    def shrinking(model_fn, loader, *args, **kwargs):
        calls.append(1)
        if len(calls) > 1:  # from epoch 2 on, every evaluation batch loses a row
            original = model_fn

            def model_fn(images):  # the same logits, computed as a batch one row short and one row
                return torch.cat([original(images[:-1]), original(images[-1:])])

        return real(model_fn, loader, *args, **kwargs)

    monkeypatch.setattr(evaluation, "evaluate", shrinking)
    result = run_trial(tiny({"compile": True, "compile_backend": "eager", "epochs": 2}))
    if not calls:
        pytest.skip("the trainer does not evaluate through trials.training.evaluation.evaluate")
    assert result.status == "completed", result.error
    assert result.final["recompiles"] > 0
    assert any(note.startswith(compiled_forward.RECOMPILE_NOTE) for note in result.notes)


def test_compile_scope_and_cuda_graphs_are_validated():
    with pytest.raises(ConfigError, match=r"training\.compile_scope: must be regional or whole, got 'blocks'"):
        load_trial_config(tiny({"compile_scope": "blocks"}))
    with pytest.raises(ConfigError, match=r"training\.cuda_graphs: must be true, false or auto, got 1"):
        load_trial_config(tiny({"cuda_graphs": 1}))


def _target(device: str, image_size: int = 32, world_size: int = 1) -> SimpleNamespace:
    return SimpleNamespace(device=torch.device(device), image_size=image_size, world_size=world_size)


def _plan(cuda_graphs, scope: str = "regional") -> CompilePlan:
    return CompilePlan(True, 1.0, 100, 0.25, scope=scope, cuda_graphs=cuda_graphs)


@pytest.mark.parametrize(
    ("device", "image", "world", "setting", "scope", "mode", "noted"),
    [
        ("cpu", 32, 1, "auto", "regional", None, False),
        ("cpu", 32, 1, True, "regional", None, True),  # asked for, impossible: said
        ("cuda", 32, 1, "auto", "whole", REDUCE_OVERHEAD, False),
        ("cuda", 64, 1, "auto", "whole", REDUCE_OVERHEAD, False),
        ("cuda", 65, 1, "auto", "regional", None, False),  # not launch-bound: no graphs
        ("cuda", 224, 1, True, "whole", REDUCE_OVERHEAD, False),  # asked for: taken
        ("cuda", 32, 2, "auto", "regional", None, False),  # data-parallel: collectives between kernels
        ("cuda", 32, 2, True, "regional", None, True),
        ("cuda", 32, 1, False, "regional", None, False),
    ],
)
def test_cuda_graphs_are_taken_only_under_their_conditions(device, image, world, setting, scope, mode, noted):
    choice = choose_compile(_target(device, image, world), _plan(setting))
    assert (choice.scope, choice.mode, choice.note is not None) == (scope, mode, noted)
    assert choice.cuda_graphs == (mode == REDUCE_OVERHEAD)


def test_whole_scope_is_kept_when_cuda_graphs_are_not_taken():
    assert choose_compile(_target("cpu"), _plan("auto", scope="whole")).scope == "whole"


def test_a_stubbed_cuda_trial_compiles_with_cuda_graphs_only_when_small(monkeypatch):
    """The trainer passes the choice to torch.compile: ``reduce-overhead`` and the whole model for a
    32 px trial on one stubbed CUDA device, regional with no mode at 96 px. (CUDA is stubbed as far
    as the compile call: the model never reaches a device here.)"""
    calls = []

    def recording_compile(model, **kwargs):
        calls.append(("whole", kwargs.get("mode"), kwargs.get("dynamic")))
        return model

    def recording_regions(model, *, backend, mode):
        calls.append(("regional", mode, False))
        return 2

    monkeypatch.setattr(compiled_forward.torch, "compile", recording_compile)
    monkeypatch.setattr(torch.compiler, "cudagraph_mark_step_begin", lambda: calls.append("step"))
    monkeypatch.setattr(compiled_forward, "compile_regions", recording_regions)
    monkeypatch.setattr(compiled_forward.compile_cache, "configure_compiler", lambda cpus: {"compile_cache_dir": "x"})
    for image_size in (32, 96):
        target = compiled_forward.CompileTarget(
            model=torch.nn.Linear(2, 2),
            device=torch.device("cuda"),
            dtype=torch.bfloat16,
            channels_last=True,
            image_size=image_size,
            batch_size=32,
            world_size=1,
            backend="inductor",
        )
        forward = compiled_forward.CompiledForward(target, _plan("auto"), notes=[])
        forward.run(lambda model: None)  # a step: CUDA graphs mark its beginning, nothing else does
    assert calls == [("whole", REDUCE_OVERHEAD, False), "step", ("regional", None, False)]


@pytest.mark.slow
def test_a_compiled_trial_counts_its_flops_on_the_eager_model_and_times_the_compiled_forward():
    """Issue 56: fvcore's jit trace refused the blocks regional compilation compiled in place, so every
    compiled trial (every trial of a default GPU search) failed at its cost. FLOPs are counted on the
    eager view (the same count as an eager trial's), throughput and latency through the compiled forward."""
    compiled = tiny({"compile": True, "compile_backend": "inductor", "epochs": 1}, cpus=1)
    compiled["measure"] = {"flops": True, "throughput": True, "latency": True, "batch_size": 8, "repeats": 1}
    eager = {**compiled, "training": {**compiled["training"], "compile": False}}
    result, reference = run_trial(compiled), run_trial(eager)
    assert result.status == "completed", result.error
    assert result.cost.flops == reference.cost.flops > 0
    assert result.cost.compiled and result.final["compiled"] == 1.0 and not reference.cost.compiled
    assert result.cost.throughput > 0 and result.cost.latency_ms > 0
    # The model trains compiled after its FLOPs were counted: the eager view was put back.
    assert result.final["compiled_graphs"] >= 2 and result.final["recompiles"] == 0
