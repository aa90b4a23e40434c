"""Forward or backward: the two passes of primitives that have no weights (activation, pooling)."""

from __future__ import annotations

import enum

from miopy.errors import bad


class Pass(enum.Enum):
    FORWARD = "F"
    BACKWARD = "B"

    @classmethod
    def parse(cls, value: str | Pass) -> Pass:
        if isinstance(value, Pass):
            return value
        names = {"F": "F", "FWD": "F", "FORWARD": "F", "B": "B", "BWD": "B", "BACKWARD": "B"}
        key = str(getattr(value, "value", value)).upper()
        if key not in names:
            raise bad("direction", value, "expected forward or backward")
        return cls(names[key])

    @property
    def title(self) -> str:
        return {"F": "Forward", "B": "Backward"}[self.value]


def layouts_key(descs) -> str:
    """One layout name when every tensor shares it, else each tensor's key joined by '.'."""
    keys = [d.key() for d in descs]
    return keys[0] if len(set(keys)) == 1 and descs[0].packed else ".".join(keys)


def float_text(value: float) -> str:
    """A float as it round-trips through a key: '1', '0.5', '-2.25', '1e-07'."""
    value = float(value)
    return str(int(value)) if value.is_integer() and abs(value) < 1e15 else repr(value)
