"""After training: ``evaluate``, ``predict`` and ``compare``, each in the module of its name (imported by
none here, so that the command line builds its options from ``comparison_table`` without torch)."""
