"""Convolution solvers, one module per family."""
