"""The names of the numbers :class:`~ignite_r3net.metrics.saliency.SaliencyMetrics` computes.

Plain data, without torch: the command line lists them in ``compare --help``."""

#: Keys of the dict returned by :meth:`SaliencyMetrics.compute`, in reporting order.
METRIC_KEYS = ("mae", "maxF", "meanF", "adpF", "Sm", "maxE", "meanE", "adpE", "wF")
