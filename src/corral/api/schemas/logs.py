"""A session's logs as the API pages them."""

from __future__ import annotations

from pydantic import BaseModel, Field

from corral.services.logs import LogPage


class LogChunkOut(BaseModel):
    id: int
    rank: int
    stream: str = Field(description="`stdout`, `stderr`, or `prepare`: the output of its image's build")
    offset: int = Field(description="byte offset of this chunk in its stream")
    data: str = Field(description="the bytes as UTF-8 (invalid sequences shown as U+FFFD)")


class LogsOut(BaseModel):
    chunks: list[LogChunkOut]
    next: int = Field(description="pass as `after` for the next page")
    complete: bool = Field(description="the session has ended and all of its output has been read")
    dropped: int = Field(description="bytes dropped by the per-session log cap (the oldest ones)")

    @classmethod
    def of(cls, page: LogPage) -> LogsOut:
        return cls(
            chunks=[
                LogChunkOut(
                    id=c.id,
                    rank=c.rank,
                    stream=c.stream,
                    offset=c.offset,
                    data=c.data.decode("utf-8", "replace"),
                )
                for c in page.chunks
            ],
            next=page.next,
            complete=page.complete,
            dropped=page.dropped,
        )
