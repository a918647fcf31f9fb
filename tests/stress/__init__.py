"""Long stress runs, started by hand (``python tests/stress/SCRIPT.py``); the suite keeps a short
version of each, marked ``slow``."""
