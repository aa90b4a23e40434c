"""The contract every primitive's problem implements, so that the engine, the handle, the DBs, the
logging and the driver harness never name a primitive.

A problem is a frozen description of one call: its tensors by role (which are read, which are
written), a canonical key (find DB, CLI, logs; ``parse(key).key() == key``), a network config (what
an invoker depends on), the view its solvers see, its work counts, and the ``miopy-driver``
command line that reproduces it.
"""

from __future__ import annotations

import abc
from typing import TYPE_CHECKING, ClassVar

if TYPE_CHECKING:
    from miopy.tensor import DataType, TensorDesc


class Problem(abc.ABC):
    """Base of ConvProblem, and of the problem of every later primitive."""

    # "conv", "pool", "activ", ...: picks the solver list, and is part of every DB record.
    primitive: ClassVar[str]
    # MIOpen's name in the logged command line, e.g. "[LogCmdConvolution]".
    log_name: ClassVar[str]

    # ---- identity ------------------------------------------------------------------------------
    @abc.abstractmethod
    def key(self) -> str:
        """The canonical key; ``type(self).parse(self.key()) == self``."""

    @classmethod
    @abc.abstractmethod
    def parse(cls, key: str) -> Problem:
        """Inverse of ``key()``; a malformed key raises BadParm naming it."""

    @abc.abstractmethod
    def network_config(self) -> str:
        """Everything an invoker depends on (shapes, layouts, data type, direction...)."""

    def invoker_key(self) -> str:
        """The invoker cache's key: the network config plus every tensor's full strides, so that
        two problems sharing a cached invoker address memory identically."""
        strides = ";".join(",".join(map(str, d.strides)) for d in self.tensors().values())
        return f"{self.network_config()}|{strides}"

    # ---- tensors ---------------------------------------------------------------------------------
    @abc.abstractmethod
    def tensors(self) -> dict[str, TensorDesc]:
        """Every tensor of the call by role, e.g. {"x": .., "w": .., "y": ..}."""

    @property
    @abc.abstractmethod
    def inputs(self) -> tuple[str, ...]:
        """The roles the call reads."""

    @property
    @abc.abstractmethod
    def outputs(self) -> tuple[str, ...]:
        """The roles the call writes (a role may be both read and written)."""

    @property
    def dtype(self) -> DataType:
        """The data type of the first output (what verification tolerances follow)."""
        return self.tensors()[self.outputs[0]].dtype

    # ---- what solvers see ----------------------------------------------------------------------
    def solver_view(self) -> Problem:
        """The problem as its solvers see it; taken once, where a call enters the engine.
        Convolution resolves pad modes and turns a transposed convolution into the opposite
        direction; most primitives are their own view."""
        return self

    def view_roles(self) -> dict[str, str]:
        """Role in ``solver_view()`` -> role in this problem (identity unless the view swaps)."""
        return {role: role for role in self.tensors()}

    # ---- counts ----------------------------------------------------------------------------------
    def flops(self) -> int:
        return 0

    def bytes(self) -> int:
        """Bytes read plus bytes written, each tensor counted once per direction of use."""
        descs = self.tensors()
        return sum(descs[r].nbytes for r in self.inputs) + sum(descs[r].nbytes for r in self.outputs)

    # ---- reproduction ----------------------------------------------------------------------------
    @abc.abstractmethod
    def driver_args(self, solver_id: int | None = None) -> list[str]:
        """``[subcommand, flags...]`` of the miopy-driver command that runs this problem (the
        inverse of the driver's parser); ``solver_id`` adds the flag naming a solver, if any."""

    def __str__(self) -> str:
        return self.key()


__all__ = ["Problem"]
