"""Code that a lesson needs for one demonstration only: small workers, and lesson 02's look
inside ``torch.multiprocessing`` (the lessons' main workers live in ``ddp_lib.workers``)."""
