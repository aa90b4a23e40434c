"""NumPy oracles with float64 accumulation, vectorised."""
