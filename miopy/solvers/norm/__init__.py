"""Normalisation solvers: batch norm, layer norm and group norm on one set of kernels
(kernels/common/norm.h): dense tensors take the packed kernels, anything else the strided ones."""
