"""Incremental Server-Sent Events parser, shared by the sync and async clients.

httpx has no SSE support, so `GET /v1/executions/{id}/events` is read as raw
bytes and fed here in whatever pieces the network delivers:

    parser = SSEParser()
    for event in parser.feed(chunk): handle(event.name, event.id, event.data)

Follows the WHATWG rules the broker needs (as cli/sse_parser.cpp does):
fields `event`, `id`, `data` (several data lines join with "\\n"), comments
(":...", the keepalives) and unknown fields ignored, lines ending in LF, CRLF
or CR, an event dispatched on a blank line when it has data or a name.
Bytes, not text, are split so a UTF-8 character cut between reads is whole
again before it is decoded. Pure; one thread at a time.
"""

import re
from dataclasses import dataclass
from typing import List, Optional

_EOL = re.compile(rb"\r\n|\r|\n")


@dataclass
class Event:
    name: str  # the `event:` field, "message" when absent
    data: str
    id: Optional[str]  # the last `id:` seen so far (SSE keeps it across events)


class SSEParser:
    # A line this long means a broken stream; the largest record (files,
    # outputs, result) stays well below it.
    MAX_LINE_BYTES = 64 << 20

    def __init__(self) -> None:
        self._buf = bytearray()
        self._scan = 0  # bytes of _buf already searched for a line end
        self._name = ""
        self._data: List[str] = []
        self._has_data = False
        self._id: Optional[str] = None

    def feed(self, chunk: bytes) -> List[Event]:
        """Consumes `chunk`; returns the events it completed. Raises ValueError
        for a line over MAX_LINE_BYTES."""
        self._buf += chunk
        events: List[Event] = []
        pos = 0
        while True:
            m = _EOL.search(self._buf, max(pos, self._scan))
            # A CR at the very end may be the first half of a CRLF: wait.
            if m is None or (m.group() == b"\r" and m.end() == len(self._buf)):
                break
            self._line(bytes(self._buf[pos:m.start()]).decode("utf-8", "replace"), events)
            pos = m.end()
        del self._buf[:pos]
        # A long line arrives in many pieces: search each byte once (a
        # trailing CR is looked at again).
        self._scan = max(0, len(self._buf) - 1)
        if len(self._buf) > self.MAX_LINE_BYTES:
            raise ValueError(f"SSE line over {self.MAX_LINE_BYTES} bytes")
        return events

    def _line(self, line: str, out: List[Event]) -> None:
        if not line:
            if self._has_data or self._name:
                out.append(Event(self._name or "message", "\n".join(self._data), self._id))
            self._name, self._data, self._has_data = "", [], False
            return
        if line.startswith(":"):
            return
        name, _, value = line.partition(":")
        if value.startswith(" "):
            value = value[1:]
        if name == "event":
            self._name = value
        elif name == "data":
            self._data.append(value)
            self._has_data = True
        elif name == "id" and "\0" not in value:
            self._id = value
