"""Training: start-up (``start``: checks, then the workers), the worker, the Engine and its handlers."""
