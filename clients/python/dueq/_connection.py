"""What producers and workers share: broker endpoints tried in turn, and
CurveZMQ keys read from the files `dueq keygen` writes."""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass
from typing import Optional, Sequence, Union

import zmq

PathLike = Union[str, "os.PathLike[str]"]


@dataclass(frozen=True)
class CurveKeys:
    """A client's CurveZMQ keys: the broker's public key and the client's own
    pair, each the 40-character Z85 text."""
    server_public: str
    public: str
    secret: str

    @staticmethod
    def from_files(server_pub: PathLike, client_key: PathLike) -> "CurveKeys":
        """Reads the broker's `NAME.pub` and the client's `NAME.key`."""
        server = _read_key_file(server_pub, ("public",))
        own = _read_key_file(client_key, ("public", "secret"))
        return CurveKeys(server["public"], own["public"], own["secret"])

    def apply(self, socket: zmq.Socket) -> None:  # type: ignore[type-arg]
        socket.curve_serverkey = self.server_public.encode()
        socket.curve_publickey = self.public.encode()
        socket.curve_secretkey = self.secret.encode()


def _read_key_file(path: PathLike, names: Sequence[str]) -> dict[str, str]:
    with open(path, "rb") as f:
        try:
            table = tomllib.load(f)
        except tomllib.TOMLDecodeError as error:
            raise ValueError(f"{os.fspath(path)}: not a dueq key file: {error}") from None
    keys = {}
    for name in names:
        value = table.get(name)
        if not isinstance(value, str) or len(value) != 40:
            raise ValueError(f"{os.fspath(path)}: `{name}` is not a 40-character Z85 key")
        keys[name] = value
    return keys


class Endpoints:
    """Broker endpoints used one at a time; `advance` moves to the next and
    says whether a whole pass over the list just ended (docs/protocol.md §1)."""

    def __init__(self, endpoints: Union[str, Sequence[str]]):
        listed = [endpoints] if isinstance(endpoints, str) else list(endpoints)
        self.all = [e.strip() for item in listed for e in item.split(",") if e.strip()]
        if not self.all:
            raise ValueError("no broker endpoint given")
        self.index = 0

    @property
    def current(self) -> str:
        return self.all[self.index]

    def advance(self) -> bool:
        self.index = (self.index + 1) % len(self.all)
        return self.index == 0

    def move_to(self, endpoint: str) -> bool:
        if endpoint in self.all:
            self.index = self.all.index(endpoint)
            return True
        return False

    MAX_ENDPOINTS = 16

    def learn(self, endpoint: str) -> bool:
        """Adds the leader a standby named (its not_leader message) when it is
        not listed: once, at most MAX_ENDPOINTS in all, never a wildcard address."""
        if not endpoint.startswith(("tcp://", "ipc://")) or "://*:" in endpoint or "://0.0.0.0:" in endpoint:
            return False
        if endpoint in self.all or len(self.all) >= self.MAX_ENDPOINTS:
            return False
        self.all.append(endpoint)
        return True


def open_dealer(context: zmq.Context, endpoint: str, routing_id: Optional[bytes],  # type: ignore[type-arg]
                keys: Optional[CurveKeys]) -> zmq.Socket:  # type: ignore[type-arg]
    socket: zmq.Socket = context.socket(zmq.DEALER)  # type: ignore[type-arg]
    socket.linger = 0
    if routing_id is not None:
        socket.routing_id = routing_id
    if keys is not None:
        keys.apply(socket)
    socket.connect(endpoint)
    return socket
