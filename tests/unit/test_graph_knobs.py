"""The CUDA graph knobs: a lone kernel launch replays as a graph by default, a lone library call
(cuBLAS, cuBLASLt) is made directly unless MIOPY_GRAPH_SINGLE_LIBRARY asks for a graph."""

from __future__ import annotations

import pytest

from miopy import config


@pytest.mark.parametrize(
    ("value", "launch", "library"),
    [(None, True, False), ("1", True, True), ("0", False, False), ("off", False, False), ("on", True, True)],
)
def test_graph_knobs(monkeypatch, value, launch, library):
    for name in ("MIOPY_GRAPH_SINGLE_LAUNCH", "MIOPY_GRAPH_SINGLE_LIBRARY"):
        if value is None:
            monkeypatch.delenv(name, raising=False)
        else:
            monkeypatch.setenv(name, value)
    assert config.graph_single_launch() is launch
    assert config.graph_single_library() is library
