"""Choosing solutions: find (time the candidates), immediate mode, tuning."""
