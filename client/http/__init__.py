"""The HTTP/JSON gateway (`raftbus http`): the cluster over HTTP through the SDK, with an OpenAPI 3 document,
interactive docs and a live dashboard. Needs the `http` extra (fastapi, uvicorn). See docs/http.md."""
