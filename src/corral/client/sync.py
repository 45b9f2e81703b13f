"""`Client`: the API from ordinary (blocking) Python."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import replace
from types import TracebackType
from typing import TYPE_CHECKING, Any, TypeVar

import httpx

from corral.client import sse
from corral.client.endpoint import Call, Raw, Stream, Sync, one
from corral.client.errors import Unreachable
from corral.client.resources import Resources
from corral.client.transport import API, TIMEOUT, Target, answer, pool, refusal, request
from corral.client.waiting import Backoff, Deadline

if TYPE_CHECKING:
    from corral.client import models as m

T = TypeVar("T")


class Client(Resources[Sync]):
    """A Corral API client.

        with Client() as corral:                     # CORRAL_URL / CORRAL_API_KEY, else `corral up`'s
            s = corral.sessions.submit(command=["python", "train.py"], cluster_size=2)
            done = corral.wait(s.id)
            print(done.status, done.root_cause.line() if done.root_cause else "")

    Every failure raises `CorralError` (its `status`, `code`, `message` and `details` are the
    API's error body); a server that cannot be reached raises its subclass `Unreachable`.
    `raw` has the same calls, answering the API's JSON as sent.
    """

    def __init__(
        self,
        url: str | None = None,
        api_key: str | None = None,
        *,
        timeout: float = TIMEOUT,
        http: httpx.Client | None = None,
    ) -> None:
        self.target = Target.of(url, api_key)
        self._http = http or pool(self.target.url, timeout)
        self._owned = http is None
        super().__init__(self)
        self.raw = RawCalls(self)

    @property
    def url(self) -> str:
        return self.target.url

    def run(self, call: Call[T]) -> T:
        try:
            resp = self._http.send(request(self._http, self.target, call))
        except httpx.HTTPError as exc:
            raise Unreachable(self.target.url, str(exc) or type(exc).__name__) from None
        return answer(call, resp)

    def me(self) -> m.Me:
        return self.users.me()

    def wait(self, session_id: str, timeout: float | None = None) -> m.Session:
        """The session once it has ended (TERMINATED, CANCELLED or ERROR); with `timeout`, a
        `TimeoutError` if it has not by then. Its retries are other sessions: see `wait_chain`."""
        deadline, backoff = Deadline(timeout), Backoff()
        while True:
            s = self.sessions.get(session_id)
            if s.ended:
                return s
            time.sleep(deadline.clip(backoff.next(), f"session {session_id} to end"))

    def wait_chain(self, session_id: str, timeout: float | None = None) -> m.Session:
        """The last attempt of the session's retry chain, once it has ended and no retry of it is
        to come (the retry engine has decided)."""
        deadline, backoff = Deadline(timeout), Backoff()
        current = session_id
        while True:
            s = self.sessions.get(current)
            if s.next_attempt_id:
                current, backoff = s.next_attempt_id, Backoff()
                continue
            if s.ended and s.retry_state != "scheduled" and s.retry_reason is not None:
                return s
            time.sleep(deadline.clip(backoff.next(), f"the retry chain of {session_id} to end"))

    def wait_array(self, array_id: str, timeout: float | None = None) -> m.Array:
        """The array once every element has ended and no retry of one is still to come."""
        deadline, backoff = Deadline(timeout), Backoff()
        while not (a := self.arrays.get(array_id)).settled:
            time.sleep(deadline.clip(backoff.next(), f"array {array_id} to settle"))
        return a

    def follow(self, session_id: str, after: int = 0) -> Iterator[m.LogChunk]:
        """Its output as it comes, until the session has ended and all of it has been read."""
        backoff = Backoff()
        while True:
            page = self.sessions.logs(session_id, after=after)
            yield from page.chunks
            after = page.next
            if page.complete:
                return
            if page.chunks:
                backoff = Backoff()
            else:
                time.sleep(backoff.next())

    def stream_events(
        self,
        after: str | None = None,
        *,
        type: list[str] | None = None,
        session: str | None = None,
        array: str | None = None,
        project: str | None = None,
    ) -> Iterator[m.Event]:
        """Events as they commit, for as long as you read: after the position `after` (None:
        from now), with the filters of `events.list`.  A dropped connection (or a manager's
        restart) is opened again where it stopped: nothing missed, nothing twice."""
        from corral.client import models

        params = sse.event_params(type, session, array, project)
        return self.stream(Stream("/events/stream", one(models.Event), params, after))

    def stream(self, call: Stream[T]) -> Iterator[T]:
        """A stream's messages as they come (see `Stream`), for as long as you read."""
        last, retry = call.after, sse.Retry()
        while True:
            parser = sse.Parser(last_id=last)
            try:
                with self._http.stream(
                    "GET",
                    self.target.url + API + call.path,
                    params=call.params,
                    headers=sse.resumed(self._auth(), last),
                    timeout=httpx.Timeout(self._http.timeout.connect, read=sse.STREAM_READ_TIMEOUT),
                ) as resp:
                    if resp.status_code >= 400:
                        resp.read()
                        raise refusal(resp)
                    for message in sse.messages(resp.iter_lines(), parser):
                        if message.event == "resync":
                            parser.last_id = str(message.json()["after"])
                            break
                        retry = sse.Retry()
                        if message.event == call.end:
                            return
                        yield call.read(message.json())
            except httpx.HTTPError:
                time.sleep(retry.next())
            finally:
                last = parser.last_id

    def _auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.target.key}"}

    def close(self) -> None:
        if self._owned:
            self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *_: type[BaseException] | BaseException | TracebackType | None) -> None:
        self.close()


class RawCalls(Resources[Raw]):
    """`Client.raw`: every call of `Client`, answering the API's JSON as it was sent (what
    `corral -o json` prints). Nothing is read into a result type: a command that only shows an
    answer does not load pydantic for it."""

    def __init__(self, client: Client) -> None:
        super().__init__(self)
        self._client = client

    def run(self, call: Call[Any]) -> Any:
        return self._client.run(replace(call, read=_unread))

    def stream(self, call: Stream[Any]) -> Iterator[Any]:
        return self._client.stream(replace(call, read=_unread))


def _unread(data: Any) -> Any:
    return data
