"""``serve``: the model behind an HTTP endpoint (FastAPI on uvicorn, the serve extra) with a demo page.

``server`` runs it (the socket, uvicorn, the signals, the request log), ``app`` holds the routes and checks and
decodes what is posted, ``model`` loads the checkpoint or exported file and runs the requests that arrive
together as one forward pass, ``static/`` is the demo page."""
