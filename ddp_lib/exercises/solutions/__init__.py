"""Worked solutions to the checked exercises, one module per lesson: open one after trying."""
