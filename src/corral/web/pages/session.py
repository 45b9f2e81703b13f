"""/ui/sessions/{id}: a session's attempt chain, root cause, history, output and why it waits, with
cancel and retry; its live parts refresh over the event stream.  Another project's session is a
404, exactly as in the API."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request
from fastapi.responses import RedirectResponse, Response

from corral.api.schemas.session_out import HistoryOut, SessionOut, errors_of
from corral.api.state import State
from corral.domain.status import TERMINAL_SESSION, SessionResult
from corral.services import events, logs, retry_chain
from corral.services import sessions as svc
from corral.services.errors import CorralError, InvalidInput
from corral.web.auth import Seen, form_of
from corral.web.templating import page
from corral.web.views import decision

router = APIRouter(include_in_schema=False)

STOP_POLLING = 286
"""htmx's status for "this is the last answer: stop polling" (the output of an ended session)."""

LOG_BYTES = 256 * 1024
"""Of each kernel's output the page shows the first this many bytes (the CLI has the rest)."""
LOG_PAGES = 8
"""At most this many pages of the session's stored output are read for one rank's (a quiet rank
of a chatty gang would otherwise have the whole log read, at every refresh)."""
DONE = {"cancel": "Cancel requested.", "retry": "Retry made.", "submitted": "Submitted."}
"""What a page may say it did (?done=): fixed words, never text from the URL."""


async def _output(state: State, viewer: Seen, session_id: str, rank: int) -> tuple[str, bool, bool]:
    """A kernel's stored output (stdout and stderr interleaved as written), whether more is cut
    off, and whether all of it is stored (the session ended and its agents shipped everything)."""
    text: list[bytes] = []
    after, total = 0, 0
    for _ in range(LOG_PAGES):
        got = await logs.read(state.reader, viewer.who, session_id, after)
        for chunk in got.chunks:
            if chunk.rank == rank and chunk.stream in ("stdout", "stderr"):
                text.append(chunk.data)
                total += len(chunk.data)
        if not got.chunks:
            return b"".join(text).decode(errors="replace"), False, got.complete
        if total >= LOG_BYTES:
            break
        after = got.next
    return b"".join(text)[:LOG_BYTES].decode(errors="replace"), True, False


@router.get("/ui/sessions/{session_id}")
async def session_page(
    request: Request,
    state: State,
    viewer: Seen,
    session_id: str,
    rank: Annotated[int, Query(ge=0, le=100_000)] = 0,
    block: Annotated[str | None, Query(pattern="^(live|logs)$")] = None,
    done: Annotated[str | None, Query(max_length=20)] = None,
) -> Response:
    try:
        since = await events.newest(state.reader)  # before the reads: the stream misses nothing
        record = await svc.get(state.reader, viewer.who, session_id[:64])
        chain = await svc.attempts(state.reader, viewer.who, record.id)
        history = await svc.history(state.reader, viewer.who, record.id)
        waiting = await svc.waiting_reason(state.reader, record)
        why = await svc.waiting(state.reader, record)
        stopped = await svc.victims(state.reader, viewer.who, record)
        ranks = sorted(k.rank for k in record.kernels) or [0]
        if rank not in ranks:
            raise InvalidInput("rank", f"rank: this session's kernels are ranks {ranks[0]} to {ranks[-1]}")
        output, cut, complete = await _output(state, viewer, record.id, rank)
    except CorralError as exc:
        return page(request, "error.html", viewer, exc.status, error=exc)
    rows = await svc.chain_rows(state.reader, chain)
    attempts = [SessionOut.of(a, chain=rows.get(a.root_session_id)) for a in chain]
    latest = chain[-1]
    ended = record.status in TERMINAL_SESSION
    chain_open = latest.retry_state is None and retry_chain.may_retry(latest)
    return page(
        request,
        "session.html",
        viewer,
        STOP_POLLING if block == "logs" and ended and complete else 200,
        block=block,
        s=SessionOut.of(record, waiting, rows.get(record.root_session_id), why, [v.id for v in stopped]),
        rec=record,
        victims=stopped,
        attempts=[(a, decision(a, r)) for a, r in zip(attempts, chain, strict=True)],
        errors=errors_of(record),
        history=[HistoryOut.of(h) for h in history],
        output=output,
        cut=cut,
        rank=rank,
        ranks=ranks,
        # As the services judge: a live attempt, or an ended one whose retry is not yet decided,
        # can be stopped; an ended chain that did not succeed can be retried by hand.
        may_cancel=latest.status not in TERMINAL_SESSION or chain_open,
        may_retry=latest.status in TERMINAL_SESSION and latest.result is not SessionResult.SUCCESS,
        ended=ended and complete,
        done=DONE.get(done or ""),
        since=str(since),
    )


@router.post("/ui/sessions/{session_id}/{action}")
async def act(request: Request, state: State, viewer: Seen, session_id: str, action: str) -> Response:
    """Cancel or retry (manual), then back to the session with what happened."""
    await form_of(request, viewer)
    try:
        if action == "cancel":
            stopped = await retry_chain.cancel(state.engine, viewer.who, session_id[:64])
            target = stopped.id
        elif action == "retry":
            made = await retry_chain.retry(state.engine, viewer.who, session_id[:64])
            target = made.id
        else:
            return page(request, "error.html", viewer, 404, error=None, message=f"no action {action[:40]!r}")
    except CorralError as exc:
        return page(request, "error.html", viewer, exc.status, error=exc)
    state.wakeup.scheduler()
    return RedirectResponse(f"/ui/sessions/{target}?done={action}", status_code=303)
