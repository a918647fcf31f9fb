"""After training: ``evaluate`` (checkpoints or saved maps), ``predict`` and ``compare``.

Each command is in the module of its name (``evaluate.evaluate_checkpoint``, ``predict.predict``,
``compare.compare``); this package imports none of them, so that the command line builds its
options (from ``comparison_table``) without importing torch.
"""
