"""Data: pair listing and header checks (``folder``, ``checks``), ``decode``, the ``synthetic`` set, augmentation
(``transforms``), the sets and loaders (``loader``) and resumable sampling (``sampler``). Listing, checking and
generating need only PIL and numpy, so ``make-data`` and ``check-data`` start without importing torch."""
