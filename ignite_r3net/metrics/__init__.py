"""Salient-object-detection metrics (MAE, F-, S-, E- and weighted F-measure) with the numbers of
PySODMetrics: ``saliency.SaliencyMetrics``, an ignite ``Metric``, scores maps from the per-map
histograms of ``histogram`` (S-measure: ``structure``) and, on the CPU, ``weighted_f``; ``keys``
names its numbers without torch. Import from the submodule that defines a name.
"""
