"""API shapes of batch submission: job arrays and bulk creates."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from corral.api.schemas.session_in import SessionCreate
from corral.api.schemas.session_out import SessionOut
from corral.services.arrays import ArrayView

MAX_BULK = 1000


class ArrayOut(BaseModel):
    array_id: str
    indices: str = Field(description="its indices, as 'a-b,c'")
    size: int = Field(description="how many elements")
    session_ids: list[str] = Field(description="each element's latest attempt, by index")
    counts: dict[str, int] = Field(description="elements per status of their latest attempt")
    succeeded: int = Field(description="elements whose latest attempt succeeded")
    settled: bool = Field(description="every element has ended and no retry of it is still to come")
    retried: int | None = Field(None, description="elements a retry of the whole array retried")

    @classmethod
    def of(cls, v: ArrayView, retried: int | None = None) -> ArrayOut:
        return cls(
            array_id=v.array_id,
            indices=v.indices,
            size=len(v.session_ids),
            session_ids=list(v.session_ids),
            counts=dict(v.counts),
            succeeded=v.succeeded,
            settled=v.settled,
            retried=retried,
        )


class BulkCreate(BaseModel):
    """Sessions created in one transaction (all or none); each may carry its own creation_id."""

    model_config = ConfigDict(extra="forbid")

    sessions: list[SessionCreate] = Field(min_length=1, max_length=MAX_BULK)


class BulkItemOut(BaseModel):
    created: bool = Field(description="false: the caller's earlier session with this creation_id")
    session: SessionOut


class BulkOut(BaseModel):
    sessions: list[BulkItemOut]
