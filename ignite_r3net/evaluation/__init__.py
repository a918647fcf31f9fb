"""After training: ``evaluate`` (checkpoints or saved maps), ``predict``, ``compare`` and ``export``.

Each command is in the module of its name (``evaluate.evaluate_checkpoint``, ``predict.predict``,
``compare.compare``, ``export.export_model``); this package imports none of them, so that the command
line builds its options (from ``report`` and ``export_formats``) without importing torch.
"""
