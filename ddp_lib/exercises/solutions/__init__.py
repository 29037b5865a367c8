"""Worked solutions to the lessons' checked exercises, one module per lesson. Open one after
trying the exercise yourself: the checker tells you what is wrong before this does."""
