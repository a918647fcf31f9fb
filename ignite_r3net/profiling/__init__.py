"""``profile``: what a model costs (``command``), how it is measured and the largest training batch a GPU holds
(``measure``), and the rows, their JSON and their tables (``report``)."""
