// SseParser: an incremental parser for a Server-Sent Events stream, as
// GET /v1/executions/{id}/events sends it (the WHATWG rules the broker needs;
// cli/sse_parser.cpp is its C++ twin).
//
//   const parser = new SseParser();
//   for (const e of parser.push(text)) handle(e.event, e.id, e.data);
//
// Text may arrive split anywhere (inside a line, between "\r" and "\n"):
// complete events come out in order. Fields `event`, `id`, `data` (several
// data lines join with "\n"); comments (":...") and unknown fields are
// ignored; an event is dispatched on a blank line when it has data or a
// name. A line over maxLineChars throws: the stream is then unusable.

export class SseParser {
  constructor({ maxLineChars = 16 << 20 } = {}) {
    this.maxLineChars = maxLineChars;
    this.lastEventId = ''; // the id buffer: persists between events (a reconnect sends it)
    this._partial = '';
    this._skipLf = false; // the previous chunk ended in "\r": a leading "\n" ends nothing
    this._event = '';
    this._data = [];
  }

  /** Consumes decoded text; returns the events it completed. */
  push(text) {
    const out = [];
    const lineEnd = /[\r\n]/g;
    let start = 0;
    if (this._skipLf && text.startsWith('\n')) start = 1;
    this._skipLf = false;
    lineEnd.lastIndex = start;
    for (let m = lineEnd.exec(text); m !== null; m = lineEnd.exec(text)) {
      const end = m.index;
      const line = this._partial + text.slice(start, end);
      this._partial = '';
      this._line(line, out);
      start = end + 1;
      if (text[end] === '\r') {
        if (start === text.length) this._skipLf = true;
        else if (text[start] === '\n') start += 1;
      }
      lineEnd.lastIndex = start;
    }
    this._partial += text.slice(start);
    if (this._partial.length > this.maxLineChars) {
      throw new Error(`event stream line over ${this.maxLineChars} characters`);
    }
    return out;
  }

  _line(line, out) {
    if (line === '') {
      if (this._data.length > 0 || this._event !== '') {
        out.push({ event: this._event || 'message', id: this.lastEventId, data: this._data.join('\n') });
      }
      this._event = '';
      this._data = [];
      return;
    }
    if (line.startsWith(':')) return;
    const colon = line.indexOf(':');
    const field = colon < 0 ? line : line.slice(0, colon);
    let value = colon < 0 ? '' : line.slice(colon + 1);
    if (value.startsWith(' ')) value = value.slice(1);
    if (field === 'data') this._data.push(value);
    else if (field === 'event') this._event = value;
    else if (field === 'id' && !value.includes('\0')) this.lastEventId = value;
  }
}
