"""One declaration per route, run by the sync or the async client alike.

A resource method builds a `Call` (method, path, query, body, and how to read the answer); the
`endpoint` descriptor hands it to its client's transport. So `Client().sessions.get(id)` returns a
`Session` and `AsyncClient().sessions.get(id)` an awaitable of one, from the same line of code, and
`Client().raw.sessions.get(id)` the API's JSON as sent.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from importlib import import_module
from typing import TYPE_CHECKING, Any, Concatenate, Generic, ParamSpec, Protocol, TypeVar, overload
from urllib.parse import quote

if TYPE_CHECKING:
    from pydantic import BaseModel

P = ParamSpec("P")
T = TypeVar("T")
B = TypeVar("B", bound="BaseModel")


class Sync:
    """Marks a resource of `Client`: its calls return their results."""


class Async:
    """Marks a resource of `AsyncClient`: its calls return awaitables."""


class Raw:
    """Marks a resource of `Client.raw`: its calls return the API's JSON, unread."""


M = TypeVar("M", Sync, Async, Raw)


@dataclass(frozen=True)
class Call(Generic[T]):
    method: str
    path: str
    read: Callable[[Any], T]
    params: dict[str, Any] = field(default_factory=dict)
    body: Any = None


class Runner(Protocol):
    def run(self, call: Call[Any]) -> Any: ...


class Resource(Generic[M]):
    """A group of routes (`client.sessions`, `client.users`, …) on one client's transport."""

    def __init__(self, runner: Runner) -> None:
        self._runner = runner


class Endpoint(Generic[P, T]):
    def __init__(self, build: Callable[Concatenate[Any, P], Call[T]]) -> None:
        self.build = build
        self.__doc__ = build.__doc__
        self.__name__ = build.__name__

    @overload
    def __get__(self, obj: Resource[Sync], owner: type | None = None) -> Callable[P, T]: ...
    @overload
    def __get__(self, obj: Resource[Async], owner: type | None = None) -> Callable[P, Awaitable[T]]: ...
    @overload
    def __get__(self, obj: Resource[Raw], owner: type | None = None) -> Callable[P, Any]: ...
    def __get__(self, obj: Any, owner: Any = None) -> Any:
        build, run = self.build, obj._runner.run

        def call(*args: Any, **kwargs: Any) -> Any:
            return run(build(obj, *args, **kwargs))

        call.__doc__ = build.__doc__
        call.__name__ = build.__name__
        return call


def endpoint(build: Callable[Concatenate[Any, P], Call[T]]) -> Endpoint[P, T]:
    return Endpoint(build)


@dataclass(frozen=True)
class Stream(Generic[T]):
    """A route of server-sent events, followed as sse.py says: each message's JSON read as a `T`;
    opened again where it stopped when the connection drops; over at a message of event `end`
    (None: it goes on as long as it is read)."""

    path: str
    read: Callable[[Any], T]
    params: dict[str, Any] = field(default_factory=dict)
    after: str | None = None
    end: str | None = None


class Streaming(Generic[P, T]):
    """As `Endpoint`, for a `Stream`: an iterator of `Client` (an async one of `AsyncClient`),
    from its runner's `stream`."""

    def __init__(self, build: Callable[Concatenate[Any, P], Stream[T]]) -> None:
        self.build = build
        self.__doc__ = build.__doc__
        self.__name__ = build.__name__

    @overload
    def __get__(self, obj: Resource[Sync], owner: type | None = None) -> Callable[P, Iterator[T]]: ...
    @overload
    def __get__(self, obj: Resource[Async], owner: type | None = None) -> Callable[P, AsyncIterator[T]]: ...
    @overload
    def __get__(self, obj: Resource[Raw], owner: type | None = None) -> Callable[P, Iterator[Any]]: ...
    def __get__(self, obj: Any, owner: Any = None) -> Any:
        build, stream = self.build, obj._runner.stream

        def call(*args: Any, **kwargs: Any) -> Any:
            return stream(build(obj, *args, **kwargs))

        call.__doc__ = build.__doc__
        call.__name__ = build.__name__
        return call


def streaming(build: Callable[Concatenate[Any, P], Stream[T]]) -> Streaming[P, T]:
    return Streaming(build)


def seg(value: str) -> str:
    """One path segment, escaped: an id is never read as a path (`../users` stays one segment)."""
    return quote(str(value), safe="")


class Later:
    """A module whose names are looked up on first use: `Later("corral.client.models").Session`
    imports nothing until an answer is read as one. A call answered raw never is, and pydantic,
    the largest import of a short command, is never loaded."""

    def __init__(self, module: str, name: str | None = None) -> None:
        self._module, self._name = module, name

    def __getattr__(self, attr: str) -> Any:
        if self._name is None:
            return Later(self._module, attr)
        return getattr(getattr(import_module(self._module), self._name), attr)


def one(model: type[B]) -> Callable[[Any], B]:
    def read(data: Any) -> B:
        return model.model_validate(data)

    return read


def many(model: type[B]) -> Callable[[Any], list[B]]:
    def read(data: Any) -> list[B]:
        return [model.model_validate(item) for item in data]

    return read


def nothing(_: Any) -> None:
    return None


def as_dict(data: Any) -> dict[str, Any]:
    return dict(data)


def query(**params: Any) -> dict[str, Any]:
    """Query parameters, those left unset (None) dropped; booleans as the API reads them."""
    return {
        k: ("true" if v else "false") if isinstance(v, bool) else v
        for k, v in params.items()
        if v is not None
    }
