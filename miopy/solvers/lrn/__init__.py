"""LRN solvers: direct (one work item per element, any layout, both modes and directions),
cross-channel sliding window (forward, one work item per pixel), and cross-channel window
terms kept in registers (forward and backward, one work item per pixel)."""

from miopy.solvers.lrn.direct import (
    LrnChannelsChunk,
    LrnCrossRing,
    LrnCrossRingChunk,
    LrnCrossSlide,
    LrnDirect,
)

__all__ = ["LrnChannelsChunk", "LrnCrossRing", "LrnCrossRingChunk", "LrnCrossSlide", "LrnDirect"]
