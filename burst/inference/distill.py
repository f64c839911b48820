"""From a trained run to serving tiers (``burst distill``).

The run's final checkpoint is the heavy model (the teacher). A smaller student (the
entrypoint module's ``build_student``, or ``--student MODULE:FUNC``) is trained on the
teacher's outputs on the run's data (the batches of the run's steps, ``batch_for_step``), and
an int8 variant of the student is made by torch dynamic quantization of its Linear layers.
Held-out loss (the run's own loss function against the true targets) is measured for each on
the batches that follow the run's last step, which the teacher never trained on when the run
covered less than an epoch (the quickstart covers 960 of its 4096 samples).

Every tier is stored as a checkpoint in the run's store, under ``tiers/<name>/`` (the same
chunk store, manifest commit and content addressing as the run's checkpoints, written by
``CheckpointManager``), and as a Triton model repository under ``tiers/<name>/triton/`` (what
deploy/inference's InferenceServices load: ``burst.inference.triton_repo``);
``tiers/index.json`` lists them with their figures.
"""

from __future__ import annotations

import importlib
import logging
import statistics
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

import torch
from pydantic import BaseModel, ConfigDict
from torch import nn

from burst.checkpoint.catalog import latest_checkpoint
from burst.checkpoint.manager import CheckpointManager
from burst.checkpoint.restore import restore_checkpoint
from burst.errors import BadInputError, CheckpointError
from burst.inference.triton_repo import export_tier, repository_key
from burst.inputs import parse_model
from burst.spec import BurstJob
from burst.storage import open_store
from burst.storage.location import run_url
from burst.train.setup import TrainSetup, load_entrypoint
from burst.train.weights import state_sha256

log = logging.getLogger(__name__)

INDEX_KEY = "tiers/index.json"
TierName = Literal["heavy", "distilled", "distilled-int8"]


class TierArtifact(BaseModel):
    model_config = ConfigDict(extra="forbid", defer_build=True)

    name: TierName
    kind: Literal["heavy", "distilled"]
    store: str  # a checkpoint store: chunks/, manifests/, latest.json
    manifest: str  # its manifest key (the commit)
    step: int
    weights_sha256: str
    parameters: int
    size_bytes: int  # bytes of the stored weights
    heldout_loss: float
    latency_ms_p50: float  # one sample, in this process, on this machine's CPU (measured)
    quantized: bool = False
    # its Triton model repository (an InferenceService's storageUri); None before it was written
    triton: str | None = None


class TiersDocument(BaseModel):
    model_config = ConfigDict(extra="forbid", defer_build=True)

    kind: Literal["burst/tiers"] = "burst/tiers"
    run_id: str
    spec_name: str
    teacher_step: int
    distill_steps: int
    heldout_samples: int
    seed: int
    tiers: list[TierArtifact]

    def tier(self, name: str) -> TierArtifact:
        for t in self.tiers:
            if t.name == name:
                return t
        raise BadInputError(f"no tier {name!r} in the tiers document (run burst distill)")


def load_student_builder(job: BurstJob, student: str | None) -> Callable[[BurstJob], nn.Module]:
    entry = student or job.training.entrypoint.partition(":")[0] + ":build_student"
    module_name, _, func = entry.partition(":")
    try:
        fn = getattr(importlib.import_module(module_name), func)
    except (ImportError, AttributeError) as exc:
        raise BadInputError(
            f"--student {entry}: cannot load it ({exc}); name a function MODULE:FUNC that "
            "builds the student network from the spec"
        ) from None
    return fn


def _sizes(state: dict[str, Any]) -> int:
    return sum(t.numel() * t.element_size() for t in state.values() if isinstance(t, torch.Tensor))


def quantize(student: nn.Module) -> nn.Module:
    """int8 dynamic quantization of the student's Linear layers (weights int8, activations
    quantized on the fly)."""
    with warnings.catch_warnings():
        # torch 2.13 marks torch.ao.quantization and its quantized tensor constructors
        # deprecated (torchao succeeds them, docs/inference.md); they still work, and the
        # warnings would be printed on every command
        warnings.filterwarnings("ignore", message=".*quantized tensor creation.*")
        warnings.filterwarnings("ignore", message=".*torch.ao.quantization is deprecated.*")
        from torch.ao.quantization import quantize_dynamic

        return quantize_dynamic(student.eval(), {nn.Linear}, dtype=torch.qint8)


def int8_state(qmodel: nn.Module) -> dict[str, Any]:
    """The int8 weights of a dynamically quantized model as plain tensors (what the store
    holds): per Linear, the int8 values, scale, zero point and float bias."""
    out: dict[str, Any] = {}
    for name, mod in qmodel.named_modules():
        if hasattr(mod, "_packed_params") and callable(getattr(mod, "weight", None)):
            w = mod.weight()
            bias = mod.bias()
            out[f"{name}.int8"] = w.int_repr().contiguous()
            out[f"{name}.scale"] = torch.tensor([w.q_scale()], dtype=torch.float64)
            out[f"{name}.zero_point"] = torch.tensor([w.q_zero_point()], dtype=torch.int64)
            if bias is not None:
                out[f"{name}.bias"] = bias.detach().contiguous()
    return out


def load_int8(student: nn.Module, state: dict[str, Any]) -> nn.Module:
    qmodel = quantize(student)
    for name, mod in qmodel.named_modules():
        if f"{name}.int8" in state:
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", message=".*quantized tensor creation.*")
                w = torch._make_per_tensor_quantized_tensor(
                    state[f"{name}.int8"],
                    float(state[f"{name}.scale"][0]),
                    int(state[f"{name}.zero_point"][0]),
                )
            mod.set_weight_bias(w, state.get(f"{name}.bias"))
    return qmodel


@torch.no_grad()
def heldout_loss(
    model: nn.Module, setup: TrainSetup, batches: list[tuple[torch.Tensor, torch.Tensor]]
) -> float:
    model.eval()
    losses = [float(setup.loss_fn(model(x), y)) * len(x) for x, y in batches]
    return sum(losses) / sum(len(x) for x, _ in batches)


@torch.no_grad()
def latency_ms(model: nn.Module, sample: torch.Tensor, repeat: int = 200) -> float:
    model.eval()
    for _ in range(10):
        model(sample)
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        model(sample)
        times.append((time.perf_counter() - t0) * 1000.0)
    return statistics.median(times)


def _save(url: str, step: int, state: dict[str, Any]) -> str:
    with CheckpointManager(url) as manager:
        manager.save(step, {"model": state, "metadata": {}}, tier="weights")
        result = manager.wait()
    if result is None:
        raise CheckpointError("the tier's save did not commit", where=url)
    ref = latest_checkpoint(open_store(url), "weights")
    assert ref is not None
    return ref.key


def distill(
    job: BurstJob,
    run_id: str,
    *,
    student: str | None = None,
    steps: int = 400,
    batch_size: int = 64,
    learning_rate: float = 3e-3,
    heldout_batches: int = 16,
    runs_root: Path | None = None,
) -> TiersDocument:
    """Teacher (the run's newest checkpoint), distilled student and its int8 variant, stored
    in the run's store under tiers/; returns (and stores) the tiers document."""
    threads = torch.get_num_threads()
    # the tiers are small: one intra-op thread (more only contend; the int8 kernels' thread
    # pool spins, measured 45 ms instead of 0.15 ms a sample on this 2-core machine under load)
    torch.set_num_threads(1)
    try:
        return _distill(
            job, run_id, student, steps, batch_size, learning_rate, heldout_batches, runs_root
        )
    finally:
        torch.set_num_threads(threads)


def _distill(
    job: BurstJob,
    run_id: str,
    student: str | None,
    steps: int,
    batch_size: int,
    learning_rate: float,
    heldout_batches: int,
    runs_root: Path | None,
) -> TiersDocument:
    url = run_url(job.storage.checkpoint_uri, run_id, runs_root)
    store = open_store(url)
    restored = restore_checkpoint(store)
    step = restored.step
    setup = load_entrypoint(job)(job)
    teacher = setup.model
    teacher.load_state_dict(restored.state["model"])
    teacher.eval()
    seed = job.training.seed
    torch.manual_seed(seed)
    run_data = torch.cat([setup.batch_for_step(s)[0] for s in range(step)])
    heldout = [setup.batch_for_step(step + i) for i in range(heldout_batches)]
    with torch.no_grad():
        targets = teacher(run_data)
    model = load_student_builder(job, student)(job)
    opt = torch.optim.AdamW(model.parameters(), lr=learning_rate)
    gen = torch.Generator().manual_seed(seed)
    model.train()
    for i in range(steps):
        idx = torch.randint(0, len(run_data), (batch_size,), generator=gen)
        loss = nn.functional.mse_loss(model(run_data[idx]), targets[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
        if i % 100 == 0:
            log.info("distill step %d: loss against the teacher %.5f", i, loss.item())
    model.eval()
    qmodel = quantize(_copy_student(job, student, model))
    sample = heldout[0][0][:1]
    states: dict[TierName, tuple[dict[str, Any], nn.Module, str]] = {
        "heavy": (teacher.state_dict(), teacher, "heavy"),
        "distilled": (model.state_dict(), model, "distilled"),
        "distilled-int8": (int8_state(qmodel), qmodel, "distilled"),
    }
    tiers = []
    for name, (state, net, kind) in states.items():
        tier_url = f"{url}/tiers/{name}"
        key = _save(tier_url, step, state)
        export_tier(store, name, kind, net, heldout[0][0])
        tiers.append(
            TierArtifact(
                name=name,
                kind=kind,  # type: ignore[arg-type]
                store=tier_url,
                manifest=key,
                step=step,
                weights_sha256=state_sha256(state),
                parameters=sum(
                    p.numel() for p in (teacher if name == "heavy" else model).parameters()
                ),
                size_bytes=_sizes(state),
                heldout_loss=heldout_loss(net, setup, heldout),
                latency_ms_p50=latency_ms(net, sample),
                quantized=name == "distilled-int8",
                triton=f"{url}/{repository_key(name)}",
            )
        )
        log.info(
            "tier %s: held-out loss %.5f, %d bytes",
            name,
            tiers[-1].heldout_loss,
            tiers[-1].size_bytes,
        )
    doc = TiersDocument(
        run_id=run_id,
        spec_name=job.name,
        teacher_step=step,
        distill_steps=steps,
        heldout_samples=sum(len(x) for x, _ in heldout),
        seed=seed,
        tiers=tiers,
    )
    store.put_bytes(INDEX_KEY, doc.model_dump_json(indent=2).encode())
    return doc


def _copy_student(job: BurstJob, student: str | None, trained: nn.Module) -> nn.Module:
    fresh = load_student_builder(job, student)(job)
    fresh.load_state_dict(trained.state_dict())
    return fresh.eval()


def read_tiers(job: BurstJob, run_id: str, runs_root: Path | None = None) -> TiersDocument:
    url = run_url(job.storage.checkpoint_uri, run_id, runs_root)
    from burst.storage.base import ObjectMissing

    try:
        raw = open_store(url).get_bytes(INDEX_KEY)
    except ObjectMissing:
        raise BadInputError(
            f"run {run_id} has no tiers ({url}/{INDEX_KEY}): run `burst distill` first"
        ) from None
    # the index is in a store the user writes: its mistakes are one line naming it and the
    # field (burst.inputs.parse_model), not a pydantic dump
    return parse_model(TiersDocument, raw, f"{url}/{INDEX_KEY}", what="tiers index")


def load_tier(
    job: BurstJob, doc: TiersDocument, name: str, student: str | None = None
) -> nn.Module:
    """A tier's model, restored from its checkpoint in the store (verified chunks)."""
    art = doc.tier(name)
    # the checkpoint the index names (its step), and only with the weights it names: the
    # store's newest, or weights the index does not describe, are not that tier
    state = restore_checkpoint(open_store(art.store), art.step).state["model"]
    if state_sha256(state) != art.weights_sha256:
        raise BadInputError(
            f"tiers index: tier {name!r} names weights sha256 {art.weights_sha256[:12]}, "
            f"but step {art.step} of {art.store} holds {state_sha256(state)[:12]}: run "
            "`burst distill` again"
        )
    if name == "heavy":
        model = load_entrypoint(job)(job).model
        model.load_state_dict(state)
        return model.eval()
    base = load_student_builder(job, student)(job)
    if art.quantized:
        return load_int8(base, state)
    base.load_state_dict(state)
    return base.eval()
