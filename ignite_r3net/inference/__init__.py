"""Inference shared by the commands that make maps (``evaluate``, ``predict``, ``serve``, ``export``'s checks);
docs/development.md lists its modules."""
