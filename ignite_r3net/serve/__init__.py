"""``serve``: the model behind an HTTP endpoint (FastAPI on uvicorn, the serve extra) with a demo page.

``server`` runs it (the socket, uvicorn, the signals), ``app`` holds the routes, ``batching`` runs the requests
that arrive together as one forward pass, ``uploads`` checks and decodes what is posted, ``model`` loads the
checkpoint or exported file, ``middleware`` logs one line per request, ``static/`` is the demo page."""
