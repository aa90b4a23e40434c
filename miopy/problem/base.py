"""The contract every primitive's problem implements, so that the engine, the handle, the DBs, the
logging and the driver harness never name a primitive.

A problem is a frozen description of one call: its tensors by role (which are read, which are
written), a canonical key (find DB, CLI, logs; ``parse(key).key() == key``), a network config (what
an invoker depends on), the view its solvers see, its work counts, and the ``miopy-driver``
command line that reproduces it.
"""

from __future__ import annotations

import abc
import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    from miopy.tensor import DataType, TensorDesc


# What a problem works out from its fields alone, kept on the (frozen) problem after the first
# call: a first iteration asked a convolution's key, invoker key and solver view several times each
# (the find DB, the package's choices, the invoker cache, the kept answers).
_MEMO = ("key", "network_config", "invoker_key", "solver_view")
_UNSET = object()


def _memo(fn: Callable[[Any], Any]) -> Callable[[Any], Any]:
    slot = f"_memo_{fn.__name__}"

    @functools.wraps(fn)
    def kept(self: Any) -> Any:
        value = self.__dict__.get(slot, _UNSET)
        if value is _UNSET:
            value = fn(self)
            if value is not self:  # a problem that is its own view: no cycle through itself
                self.__dict__[slot] = value  # not a field: equality and hash ignore it
        return value

    kept.memo = True  # type: ignore[attr-defined]
    return kept


class Problem(abc.ABC):
    """Base of ConvProblem, and of the problem of every later primitive. Problems are frozen:
    ``key``, ``network_config``, ``invoker_key`` and ``solver_view`` are computed once per
    problem object and kept."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for name in _MEMO:
            fn = cls.__dict__.get(name)
            if (
                callable(fn)
                and not getattr(fn, "memo", False)
                and not getattr(fn, "__isabstractmethod__", False)
            ):
                setattr(cls, name, _memo(fn))

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

    @_memo
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
    @_memo
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
