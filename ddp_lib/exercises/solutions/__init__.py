"""Worked solutions of the exercises that have checkers, one module per lesson."""
