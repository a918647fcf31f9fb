"""Salient-object-detection metrics: MAE, F-measure, S-measure, E-measure and weighted F-measure.

:class:`SaliencyMetrics` (an ignite ``Metric``) scores maps with the numbers of PySODMetrics
(``py_sod_metrics``), which follows the MATLAB toolboxes the SOD literature reports with.

* :mod:`.histogram`: per-map histograms (uint8 value x gt x S-measure quadrant), and MAE, F- and
  E-measure curves and adaptive scores from them, batched in torch on any device;
* :mod:`.structure`: the S-measure from the same histograms;
* :mod:`.weighted_f`: the weighted F-measure, one map at a time on the CPU with
  ``scipy.ndimage``'s distance transform (the one PySODMetrics calls);
* :mod:`.saliency`: the ``Metric``: input handling, exact sums, ``compute`` / ``curves``;
* :mod:`.keys`: ``METRIC_KEYS``, the names of its numbers.

Import from the submodule that defines a name (``keys`` needs no torch).
"""
