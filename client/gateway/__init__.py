"""The HTTP/JSON gateway (`raftbus http`): the cluster over HTTP through the SDK, with an OpenAPI 3 document,
interactive docs and a live dashboard. Needs the `http` extra (fastapi, uvicorn). See docs/http.md."""

if __name__ != "raftbus.gateway":  # installed as a package of its own (setup.py), never as a part of the SDK
    raise ImportError(f"{__name__} is not a module: import raftbus.gateway")
