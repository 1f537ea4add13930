"""The HTTP API: tasks started, read, decided, cancelled and followed over HTTP, for apps that have
no Temporal client (``agent-worker api``). Built on FastAPI (OpenAPI at ``/openapi.json``), served
by uvicorn, with the web inbox's authentication and authorization."""

from agent_worker.api.app import ApiConfig, build_api

__all__ = ["ApiConfig", "build_api"]
