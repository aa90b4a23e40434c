"""LRN solvers: direct (one work item per element, any layout, both modes and directions) and
cross-channel sliding window (forward, one work item per pixel)."""

from miopy.solvers.lrn.direct import LrnCrossSlide, LrnDirect

__all__ = ["LrnCrossSlide", "LrnDirect"]
