"""``reproduce``: the paper's recipe trained and evaluated, our numbers beside the published ones (``runner``)."""
