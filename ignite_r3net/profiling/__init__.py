"""``profile``: what a model costs (``command``), how it is measured (``measure``), the rows and their JSON
(``rows``), the largest training batch a GPU holds (``max_batch``) and the tables (``report``)."""
