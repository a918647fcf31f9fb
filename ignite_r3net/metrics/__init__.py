"""Salient-object-detection metrics with PySODMetrics' numbers; import from the submodule that defines a name."""
