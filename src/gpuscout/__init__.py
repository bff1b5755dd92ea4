"""gpuscout: which rented GPU finishes your job for the least total money."""

__version__ = "0.1.0"
