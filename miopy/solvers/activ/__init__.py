"""Activation solvers, forward and backward: packed (vectorised) and strided (any strides)."""

from miopy.solvers.activ.elementwise import ActivBwdPacked, ActivBwdStrided, ActivFwdPacked, ActivFwdStrided

__all__ = ["ActivBwdPacked", "ActivBwdStrided", "ActivFwdPacked", "ActivFwdStrided"]
