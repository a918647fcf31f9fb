"""Data: pair listing and checks (``folder``, ``checks``, ``scan_cache``), decoding (``decode``),
the synthetic set (``synthetic``), augmentation (``transforms``), the training and evaluation sets
and loaders (``loader``) and resumable sampling (``sampler``).

Import from the submodule that defines a name. Listing, checking and generating data need only PIL
and numpy, so ``make-data`` and ``check-data`` start without importing torch.
"""
