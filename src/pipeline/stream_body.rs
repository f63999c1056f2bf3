//! A streamed answer's bytes: read from the vendor chunk by chunk against a timer, and pumped to
//! the client through the runtime's identity stream by a JS loop that hands each chunk to the wasm
//! relay (`pipeline::stream::StreamRelay`, handed over as a JS object) in one synchronous call.

use crate::pipeline::timeouts::Wait;
use crate::providers::UpstreamError;
use crate::support::promise;
use worker::js_sys::{self, Uint8Array};
use worker::wasm_bindgen::prelude::wasm_bindgen;
use worker::wasm_bindgen::{JsCast, JsValue};
use worker::web_sys;

#[wasm_bindgen(inline_js = "
// One timer per stream rather than one per chunk: it is armed for the first read, re-armed
// only when it fires before the waiting read's deadline (or that deadline comes sooner), and
// cleared when the stream ends. perf: a set and a clear per chunk were about 5 % of a stream's CPU.
const waits = new WeakMap();
// A piece without a line break cannot end an SSE event, so it is held and the read goes on: the
// runtime hands over each chunk's first bytes apart from the rest, and each piece was a call into
// the relay (perf: two per event). What is held is returned when the body ends or fails; it does
// not restart the idle bound, which counts lines, not bytes.
const HOLD_MAX = 65536;
export function read_chunk(reader, ms) {
  let w = waits.get(reader);
  if (w === undefined) { w = { timer: undefined, fires: 0, deadline: 0, waiting: null }; waits.set(reader, w); }
  return new Promise((resolve) => {
    const now = Date.now();
    w.deadline = now + ms;
    w.waiting = resolve;
    if (w.timer === undefined || w.fires > w.deadline) arm(w, ms, now);
    let held = null, size = 0;
    const more = () => reader.read().then(
      ({ done, value }) => {
        if (done) { settle(w, resolve, held === null ? null : joined(held, size), held === null); return; }
        if (w.waiting === resolve && value instanceof Uint8Array && size + value.byteLength < HOLD_MAX
            && value.indexOf(10) < 0 && value.indexOf(13) < 0) {
          (held ??= []).push(value);
          size += value.byteLength;
          more();
          return;
        }
        settle(w, resolve, held === null ? value : joined([...held, value], size + value.byteLength), false);
      },
      (e) => {
        // The reader fails again on the next read: what was held goes first.
        if (held !== null) { settle(w, resolve, joined(held, size), false); return; }
        const s = String(e);
        settle(w, resolve, s === 'Error: aborted' ? null : s, true);
      });
    more();
  });
}
function joined(parts, size) {
  if (parts.length === 1) return parts[0];
  const out = new Uint8Array(size);
  let at = 0;
  for (const p of parts) { out.set(p, at); at += p.byteLength; }
  return out;
}
function arm(w, ms, now) {
  clearTimeout(w.timer);
  w.fires = now + ms;
  w.timer = setTimeout(() => expire(w), ms);
}
function expire(w) {
  w.timer = undefined;
  const resolve = w.waiting;
  if (resolve === null) return;
  const now = Date.now();
  if (w.deadline > now) { arm(w, w.deadline - now, now); return; }
  w.waiting = null;
  resolve(undefined);
}
function settle(w, resolve, out, last) {
  if (w.waiting === resolve) w.waiting = null;
  if (last) stop(w);
  resolve(out);
}
function stop(w) {
  if (w !== undefined && w.timer !== undefined) { clearTimeout(w.timer); w.timer = undefined; }
}
export function cancel_reader(reader) {
  stop(waits.get(reader));
  try { reader.cancel().catch(() => {}); } catch (e) {}
}
// Reads what follows the vendor's last event (usually only the chunked body's end) so the
// runtime can keep the connection for the next request; cancelled past `ms` or `max` bytes.
export async function drain_reader(reader, ms, max) {
  const deadline = Date.now() + ms;
  let left = max;
  for (;;) {
    const got = await read_chunk(reader, Math.max(0, deadline - Date.now()));
    if (got === null) return;
    if (!(got instanceof Uint8Array) || (left -= got.byteLength) < 0) { cancel_reader(reader); return; }
  }
}
// The client's body: each upstream chunk goes to the relay in one synchronous call and is written
// into a native stream once the client took the one before. perf: a JS ReadableStream whose pull
// did the same cost ~10 % more CPU per stream (the runtime calls back into JS for every chunk).
export function client_body(reader, relay, first) {
  const { readable, writable } = new IdentityTransformStream();
  const writer = writable.getWriter();
  let over = false;
  const release = () => { if (!over) { over = true; relay.free(); } };
  // The client left (the runtime cancelled the body): dropping the relay aborts upstream and
  // reports the disconnect.
  writer.closed.catch(() => release());
  if (first.byteLength > 0) writer.write(first).catch(() => {});
  (async () => {
    try {
      while (!over) {
        const got = await read_chunk(reader, relay.wait_ms(Date.now()));
        if (over) return;
        const out = got === null ? relay.end()
          : got === undefined ? relay.expired()
          : got instanceof Uint8Array ? relay.chunk(got)
          : relay.broke(typeof got === 'string' ? got : 'a chunk that is not bytes');
        if (relay.finished()) {
          // The last bytes and the end are queued together; the relay is freed off their path.
          if (out.byteLength > 0) writer.write(out).catch(() => {});
          await writer.close();
          release();
          return;
        }
        if (out.byteLength > 0) await writer.write(out);
      }
    } catch (e) {
      release();
      writer.abort(e).catch(() => {});
    }
  })();
  return readable;
}
")]
extern "C" {
    /// The reader's next chunk (a `Uint8Array`), `null` at the end (also when the connection
    /// was aborted under it: the translator then tells a whole stream from a cut one, as worker's
    /// `ByteStream` did), `undefined` once `ms` passed first, or the read's error as a string;
    /// never rejects.
    fn read_chunk(reader: &web_sys::ReadableStreamDefaultReader, ms: f64) -> js_sys::Promise;
    /// Cancels the stream under the reader (ends the vendor's connection); errors are ignored.
    fn cancel_reader(reader: &web_sys::ReadableStreamDefaultReader);
    /// Reads the body to its end (cancelled past `ms` or `max` bytes); never rejects.
    fn drain_reader(reader: &web_sys::ReadableStreamDefaultReader, ms: f64, max: f64) -> js_sys::Promise;

    /// The client's body: `first`, then what the relay makes of each upstream chunk.
    fn client_body(
        reader: &web_sys::ReadableStreamDefaultReader,
        relay: JsValue,
        first: Uint8Array,
    ) -> web_sys::ReadableStream;
}

/// A streamed body's reader; dropping it cancels the body, so a stream given up on any path
/// (a translator error, the client gone, an early failure) closes the vendor's connection.
pub struct BodyReader {
    reader: web_sys::ReadableStreamDefaultReader,
    /// False once the body was read to its end by `drain`.
    cancel_on_drop: bool,
}

/// How long, and how many bytes, a finished stream's trailing bytes are read for.
const DRAIN_MS: f64 = 2_000.0;
const DRAIN_MAX_BYTES: f64 = 65_536.0;

impl BodyReader {
    pub fn new(reader: web_sys::ReadableStreamDefaultReader) -> Self {
        BodyReader { reader, cancel_on_drop: true }
    }

    /// The reader itself, for the pump (dropping it does not cancel the body).
    pub fn handle(&self) -> web_sys::ReadableStreamDefaultReader {
        self.reader.clone()
    }

    /// Another owner of the reader, which cancels or drains it; this one then leaves it alone.
    pub fn hand_over(&mut self) -> BodyReader {
        self.cancel_on_drop = false;
        BodyReader::new(self.reader.clone())
    }

    /// After the vendor's last event: the body read to its end instead of cancelled, so the
    /// vendor's connection is reused (a cancelled one is closed: one new connection per stream).
    pub async fn drain(mut self) {
        self.cancel_on_drop = false;
        let _ = promise::settled(&drain_reader(&self.reader, DRAIN_MS, DRAIN_MAX_BYTES)).await;
    }
}

/// The client's body: `first`, then each chunk `reader` yields as `relay` (a `StreamRelay`)
/// translates it.
pub fn pump(reader: &web_sys::ReadableStreamDefaultReader, relay: JsValue, first: &[u8]) -> web_sys::ReadableStream {
    client_body(reader, relay, Uint8Array::from(first))
}

impl Drop for BodyReader {
    fn drop(&mut self) {
        if self.cancel_on_drop {
            cancel_reader(&self.reader);
        }
    }
}

// One call and one promise per chunk, the read and its timer in JS: reading through worker's
// `ByteStream` with a `Delay` beside it was a read promise, a timer closure and two timer calls.
/// The next chunk of a streamed body, or the wait's expiry.
pub async fn next_chunk(reader: &BodyReader, wait: Wait) -> Result<Option<Vec<u8>>, UpstreamError> {
    let read = promise::settled(&read_chunk(&reader.reader, wait.ms as f64)).await.unwrap_or(JsValue::UNDEFINED);
    if read.is_null() {
        return Ok(None);
    }
    if read.is_undefined() {
        return Err(wait.expired());
    }
    match read.dyn_into::<Uint8Array>() {
        Ok(bytes) => Ok(Some(bytes.to_vec())),
        Err(other) => {
            let why = other.as_string().unwrap_or_else(|| "a chunk that is not bytes".into());
            Err(broken(&why))
        }
    }
}

/// A read that failed part-way (the connection, or a chunk that is not bytes).
pub fn broken(why: &str) -> UpstreamError {
    UpstreamError::connection(format!("upstream stream broke: {why}"))
}
