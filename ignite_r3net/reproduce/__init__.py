"""``reproduce``: train with the paper's recipe, evaluate as the paper did, and set our numbers
beside the published ones (``runner``: the steps; ``table``: the results table and its files)."""
