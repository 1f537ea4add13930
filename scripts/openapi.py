"""Dump the HTTP API's OpenAPI document (what ``GET /openapi.json`` serves) to
clients/typescript/openapi.json, the input of the TypeScript client's generated types.

The document comes from ``api.build_api`` itself, over a lazy Temporal client that never connects
(building the routes needs no server). ``tests/test_typescript_client.py`` checks the committed file
against it, and the committed ``src/schema.ts`` against what ``openapi-typescript`` makes of it.

    python scripts/openapi.py            # rewrite clients/typescript/openapi.json
    python scripts/openapi.py --check    # exit 1 when the committed file is stale
    make ts-client                       # both steps: this, then `npm run generate` (and the build)
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from agent_worker.api import ApiConfig, build_api  # noqa: E402
from agent_worker.inbox.auth import Authenticator  # noqa: E402
from temporalio.client import Client  # noqa: E402

OUTPUT = REPO / "clients" / "typescript" / "openapi.json"
# Never dialled: ``lazy=True`` connects on the first call, and building the document makes none.
UNUSED_ADDRESS = "127.0.0.1:7233"


async def document() -> dict[str, Any]:
    """The API's OpenAPI document, as the API serves it."""
    client = await Client.connect(UNUSED_ADDRESS, lazy=True)
    # The authenticator does not shape the document; token mode needs one well-formed token.
    app = build_api(client, ApiConfig(auth=Authenticator("token", {"openapi-dump-only-0000": "nobody"})))
    return app.openapi()


def render() -> str:
    """The document as committed: indented JSON, keys in the order FastAPI writes them."""
    return json.dumps(asyncio.run(document()), indent=2, ensure_ascii=False) + "\n"


def main(argv: list[str]) -> int:
    text = render()
    if "--check" in argv:
        if not OUTPUT.exists() or OUTPUT.read_text() != text:
            print(f"{OUTPUT.relative_to(REPO)} is stale: run python scripts/openapi.py", file=sys.stderr)
            return 1
        return 0
    OUTPUT.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
