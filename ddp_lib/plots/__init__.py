"""Pictures for the lessons (matplotlib). Nothing else in ddp_lib imports matplotlib."""
