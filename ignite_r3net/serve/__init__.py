"""``serve``: the model behind an HTTP endpoint (FastAPI on uvicorn, the serve extra) with a demo page
(``static/``); docs/development.md lists its modules."""
