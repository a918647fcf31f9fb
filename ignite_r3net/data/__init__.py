"""Data: pair listing, checks, decoding, the synthetic set, augmentation, sets, loaders and samplers. Listing,
checking and generating need only PIL and numpy: ``make-data`` and ``check-data`` start without torch."""
