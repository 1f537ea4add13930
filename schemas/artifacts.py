"""References to content in the artifact store, and the evidence a finished task carries."""

from __future__ import annotations

from agent_worker.schemas.digests import DIGEST_PATTERN
from pydantic import BaseModel, ConfigDict, Field, model_validator


class ArtifactRef(BaseModel):
    """A named piece of content, identified by its digest in the content-addressed store."""

    name: str
    digest: str = Field(pattern=DIGEST_PATTERN)
    size: int = Field(ge=0)
    media_type: str = "application/octet-stream"


class InputFile(BaseModel):
    """One task input: text carried inline, or the digest of content already in the store.

    The name becomes the file's name in the sandbox work dir, so it must be a plain file name.
    """

    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
    content: str | None = None
    digest: str | None = Field(default=None, pattern=DIGEST_PATTERN)
    media_type: str = "text/plain"

    @model_validator(mode="after")
    def _exactly_one_source(self) -> InputFile:
        if (self.content is None) == (self.digest is None):
            raise ValueError("give exactly one of 'content' or 'digest'")
        return self


class IngestInput(BaseModel):
    """Input of ``artifacts.ingest``: the task's input files, to store and digest."""

    task_id: str
    files: list[InputFile]


class IngestResult(BaseModel):
    """Output of ``artifacts.ingest``: the input manifest."""

    inputs: list[ArtifactRef]
