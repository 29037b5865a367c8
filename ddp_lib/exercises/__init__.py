"""Checkers for the lessons' exercises: each runs a learner's worker on every rank and says
precisely what is right or wrong."""
