"""Salient-object-detection metrics with the numbers of PySODMetrics: ``saliency.SaliencyMetrics`` (an
ignite ``Metric``) scores maps from the per-map histograms of ``histogram`` and the weighted F-measure;
``keys`` names its numbers without torch. Import from the submodule that defines a name."""
