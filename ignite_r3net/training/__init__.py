"""Training: start-up (``start``: checks, then the workers), the worker (``worker``), the Engine
and its handlers (``engine``)."""
