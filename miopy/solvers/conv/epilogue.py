"""Fused conv epilogues: out = act(alpha * conv + bias[k]) + beta * out, computed by the conv
kernels' own final writes (kernels/common/conv_epilogue.h) instead of separate elementwise
kernels after them.

A solver offers it by naming, in ``epilogue_files``, the kernel files whose every kernel takes
the epilogue's arguments when built with MIOPY_EPI (and which, between them, make every write of
the output), and in ``epilogue_bias`` whether a per-output-channel bias makes sense (forward).
``fused_program`` then turns the solver's program into the fused one: the same launches with the
epilogue's defines added and its arguments appended (the bias buffer or a null pointer, then the
run-time scalars ``epi_alpha``, ``epi_beta``, ``epi_act_alpha``). The config, the problem key and
so the find and perf DBs are the plain solution's.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from miopy.problem.activation import ActivationMode
from miopy.solution import KernelSpec, Launch, Program, Scalar, Tensor

# the activations the kernels compute in their epilogue (conv_epilogue.h's MIOPY_EPI_ACT)
FUSED_ACTIVATIONS = frozenset(
    {ActivationMode.PASTHRU, ActivationMode.RELU, ActivationMode.CLIPPED_RELU, ActivationMode.LEAKY_RELU}
)
SCALARS = (
    Scalar("epi_alpha", default=1.0),
    Scalar("epi_beta", default=0.0),
    Scalar("epi_act_alpha", default=0.0),
)
BIAS_ROLE = "bias"


@dataclass(frozen=True)
class Epilogue:
    """What the fused write adds to alpha / beta: a per-channel bias and an activation."""

    bias: bool = False
    activation: ActivationMode = ActivationMode.PASTHRU

    @property
    def key(self) -> str:
        """A short name: "scale", "bias", "relu", "bias+relu"..."""
        parts = (["bias"] if self.bias else []) + (
            [self.activation.name.lower()] if self.activation is not ActivationMode.PASTHRU else []
        )
        return "+".join(parts) or "scale"

    def defines(self) -> dict[str, int]:
        return {"MIOPY_EPI": 1, "MIOPY_EPI_BIAS": int(self.bias), "MIOPY_EPI_ACT": int(self.activation)}


def supports(solver: Any, epilogue: Epilogue) -> bool:
    """Whether ``solver``'s kernels can compute ``epilogue`` in their final writes."""
    if not getattr(solver, "epilogue_files", ()):
        return False
    if epilogue.bias and not getattr(solver, "epilogue_bias", False):
        return False
    return epilogue.activation in FUSED_ACTIVATIONS


def with_epilogue(
    program: Program, files: frozenset[str], epilogue: Epilogue, bias_bytes: int = 0
) -> Program:
    """``program`` with every launch of a kernel of ``files`` built with the epilogue and given its
    arguments; its notes say which epilogue ("epilogue") and, with a bias, the extra tensor's
    bytes ("extra_tensors")."""
    steps = []
    bias = Tensor(BIAS_ROLE) if epilogue.bias else None
    for step in program.steps:
        if isinstance(step, Launch) and step.spec.file in files:
            spec = step.spec
            fused = KernelSpec(
                spec.file,
                spec.name,
                {**dict(spec.defines), **epilogue.defines()},
                spec.global_size,
                spec.local_size,
            )
            step = dataclasses.replace(step, spec=fused, args=(*step.args, bias, *SCALARS))
        steps.append(step)
    notes: dict[str, Any] = {**program.notes, "epilogue": epilogue.key}
    if epilogue.bias:
        notes["extra_tensors"] = {BIAS_ROLE: int(bias_bytes)}
    return dataclasses.replace(program, steps=tuple(steps), notes=notes)


def fused_program(solver: Any, ctx: Any, problem: Any, config: Any, epilogue: Epilogue) -> Program:
    """The solver's program for its view ``problem`` and ``config`` with ``epilogue`` fused (the
    caller checked ``supports``); the bias has one element per output channel."""
    program = solver.get_program(ctx, problem, dict(config) if config else None)
    out = problem.tensors()[solver.writes]
    bias_bytes = out.lens[1] * out.dtype.itemsize if epilogue.bias else 0
    return with_epilogue(program, frozenset(solver.epilogue_files), epilogue, bias_bytes)


def scalars(alpha: float, beta: float, act_alpha: float = 0.0) -> dict[str, float]:
    """The fused program's run-time scalars."""
    return {"epi_alpha": float(alpha), "epi_beta": float(beta), "epi_act_alpha": float(act_alpha)}


__all__ = ["Epilogue", "FUSED_ACTIVATIONS", "fused_program", "scalars", "supports", "with_epilogue"]
