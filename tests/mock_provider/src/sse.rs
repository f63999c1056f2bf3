//! Server-sent event streams: each event is one HTTP chunk, flushed at once,
//! with the cut/stall/error/delay faults applied between events.

use crate::http::Timing;
use flate2::write::GzEncoder;
use flate2::Compression;
use serde_json::Value;
use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::time::{Duration, Instant};

const STALL_LIMIT: Duration = Duration::from_secs(120);

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SseEvent {
    pub text: String,
    /// Carries generated content; the `*_after=N` faults count these.
    pub content: bool,
}

impl SseEvent {
    pub fn data(v: &Value, content: bool) -> SseEvent {
        SseEvent { text: format!("data: {v}\n\n"), content }
    }

    pub fn named(event: &str, v: &Value, content: bool) -> SseEvent {
        SseEvent { text: format!("event: {event}\ndata: {v}\n\n"), content }
    }

    pub fn raw(text: &str) -> SseEvent {
        SseEvent { text: text.to_string(), content: false }
    }

    /// Cuts the JSON payload of the data line in half so it cannot parse.
    pub fn corrupted(&self) -> SseEvent {
        let (prefix, data) = match self.text.find("data: ") {
            Some(i) => self.text.split_at(i + 6),
            None => ("", self.text.as_str()),
        };
        let data = data.trim_end();
        let mut cut = data.len() / 2;
        while !data.is_char_boundary(cut) {
            cut -= 1;
        }
        SseEvent { text: format!("{prefix}{}\n\n", &data[..cut]), content: self.content }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sse {
    pub events: Vec<SseEvent>,
    /// Sent by `error_after=N`, in the vendor's mid-stream error format.
    pub error_event: SseEvent,
    /// Sent every `ping_ms` while stalled: the vendor's keep-alive (a comment, or Anthropic's `event: ping`).
    pub ping_event: SseEvent,
}

impl Sse {
    /// Rewrites the first content event's text.
    pub fn first_content(&mut self, rewrite: impl Fn(&str) -> String) {
        if let Some(e) = self.events.iter_mut().find(|e| e.content) {
            e.text = rewrite(&e.text);
        }
    }

    /// `n` bytes of SSE comments (`: aaa…`, 64 KiB each) right after the first content event.
    pub fn pad_after_first_content(&mut self, n: usize) {
        const PIECE: usize = 64 * 1024;
        let at = self.events.iter().position(|e| e.content).map_or(0, |i| i + 1);
        let pieces = (0..n.div_ceil(PIECE)).map(|i| {
            let len = PIECE.min(n - i * PIECE).max(3);
            SseEvent::raw(&format!(":{}\n\n", "a".repeat(len - 3)))
        });
        self.events.splice(at..at, pieces.collect::<Vec<_>>());
    }

    pub fn corrupt(&mut self) {
        let target = self.events.iter().position(|e| e.content).unwrap_or(0);
        if let Some(e) = self.events.get_mut(target) {
            *e = e.corrupted();
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    Cut,
    Stall,
    Error,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    KeepOpen,
    Close,
}

/// Event index before which a fault fires: right after the Nth content event
/// (N = 0: before the first one); None when the stream has fewer content events.
pub fn trigger(events: &[SseEvent], t: &Timing) -> Option<(usize, Action)> {
    [(t.cut_after, Action::Cut), (t.stall_after, Action::Stall), (t.error_after, Action::Error)]
        .into_iter()
        .filter_map(|(n, action)| Some((position_after(events, n?)?, action)))
        .min_by_key(|(pos, _)| *pos)
}

fn position_after(events: &[SseEvent], n: u64) -> Option<usize> {
    if n == 0 {
        return events.iter().position(|e| e.content);
    }
    events.iter().enumerate().filter(|(_, e)| e.content).nth(n as usize - 1).map(|(i, _)| i + 1)
}

pub fn write_chunk(w: &mut impl Write, data: &[u8]) -> io::Result<()> {
    let mut buf = Vec::with_capacity(data.len() + 12);
    buf.extend_from_slice(format!("{:x}\r\n", data.len()).as_bytes());
    buf.extend_from_slice(data);
    buf.extend_from_slice(b"\r\n");
    w.write_all(&buf)?;
    w.flush()
}

/// Writes the events after the response head has gone out, each as its own chunk (gzip members
/// flushed per event when `gzip`, so a compressed stream is still incremental).
pub fn stream(s: &mut TcpStream, sse: &Sse, t: &Timing, gzip: bool) -> io::Result<Outcome> {
    let mut framer = Framer::new(gzip);
    let fire = trigger(&sse.events, t);
    for i in 0..=sse.events.len() {
        if let Some((_, action)) = fire.filter(|(pos, _)| *pos == i) {
            return act(s, sse, t, action, framer);
        }
        let Some(event) = sse.events.get(i) else { break };
        pause(t.delay_ms);
        write_chunk(s, &framer.frame(event.text.as_bytes())?)?;
    }
    pause(t.linger_ms);
    end(s, framer)
}

fn end(s: &mut TcpStream, framer: Framer) -> io::Result<Outcome> {
    let tail = framer.finish()?;
    if !tail.is_empty() {
        write_chunk(s, &tail)?;
    }
    s.write_all(b"0\r\n\r\n")?;
    Ok(Outcome::KeepOpen)
}

fn act(s: &mut TcpStream, sse: &Sse, t: &Timing, action: Action, mut framer: Framer) -> io::Result<Outcome> {
    match action {
        Action::Cut => {
            let _ = s.shutdown(Shutdown::Both);
            Ok(Outcome::Close)
        }
        Action::Stall => {
            match t.ping_ms {
                Some(every) => ping_until_peer_close(s, &sse.ping_event, every, STALL_LIMIT),
                None => wait_for_peer_close(s, STALL_LIMIT),
            }
            Ok(Outcome::Close)
        }
        Action::Error => {
            pause(t.delay_ms);
            write_chunk(s, &framer.frame(sse.error_event.text.as_bytes())?)?;
            end(s, framer)
        }
    }
}

/// Turns event text into what goes on the wire: as is, or through one gzip stream sync-flushed per event.
pub struct Framer(Option<GzEncoder<Vec<u8>>>);

impl Framer {
    pub fn new(gzip: bool) -> Framer {
        Framer(gzip.then(|| GzEncoder::new(Vec::new(), Compression::fast())))
    }

    pub fn frame(&mut self, data: &[u8]) -> io::Result<Vec<u8>> {
        let Some(gz) = self.0.as_mut() else { return Ok(data.to_vec()) };
        gz.write_all(data)?;
        gz.flush()?;
        Ok(std::mem::take(gz.get_mut()))
    }

    /// The gzip trailer (empty when not compressing).
    pub fn finish(self) -> io::Result<Vec<u8>> {
        self.0.map_or(Ok(Vec::new()), |gz| gz.finish())
    }
}

/// A whole body gzip-encoded.
pub fn gzip(bytes: &[u8]) -> io::Result<Vec<u8>> {
    let mut framer = Framer::new(true);
    let mut out = framer.frame(bytes)?;
    out.extend(framer.finish()?);
    Ok(out)
}

pub fn pause(ms: u64) {
    if ms > 0 {
        std::thread::sleep(Duration::from_millis(ms));
    }
}

/// Sends a keep-alive every `every_ms` (and nothing else) until the peer hangs up or `limit` passes.
fn ping_until_peer_close(s: &mut TcpStream, ping: &SseEvent, every_ms: u64, limit: Duration) {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        pause(every_ms.max(1));
        if write_chunk(s, ping.text.as_bytes()).is_err() {
            return;
        }
    }
}

/// Holds the connection silently until the peer hangs up or `limit` passes.
fn wait_for_peer_close(s: &mut TcpStream, limit: Duration) {
    let deadline = Instant::now() + limit;
    let _ = s.set_read_timeout(Some(Duration::from_millis(250)));
    let mut buf = [0u8; 4096];
    while Instant::now() < deadline {
        match s.read(&mut buf) {
            Ok(0) => return,
            Ok(_) => {}
            Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) => {}
            Err(_) => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn events(pattern: &str) -> Vec<SseEvent> {
        pattern.chars().map(|c| SseEvent { text: c.to_string(), content: c == 'c' }).collect()
    }

    #[test]
    fn trigger_positions() {
        let ev = events("sccccf");
        let t =
            |cut, stall, error| Timing { cut_after: cut, stall_after: stall, error_after: error, ..Timing::default() };
        assert_eq!(trigger(&ev, &t(None, None, None)), None);
        assert_eq!(trigger(&ev, &t(Some(0), None, None)), Some((1, Action::Cut)));
        assert_eq!(trigger(&ev, &t(Some(2), None, None)), Some((3, Action::Cut)));
        assert_eq!(trigger(&ev, &t(Some(4), None, None)), Some((5, Action::Cut)));
        assert_eq!(trigger(&ev, &t(Some(5), None, None)), None);
        assert_eq!(trigger(&ev, &t(Some(3), Some(1), Some(2))), Some((2, Action::Stall)));
        assert_eq!(trigger(&ev, &t(None, None, Some(1))), Some((2, Action::Error)));
    }

    #[test]
    fn corrupted_data_is_not_json() {
        let e = SseEvent::named("content_block_delta", &json!({"type": "x", "text": "héllo wörld"}), true);
        let broken = e.corrupted();
        assert!(broken.text.starts_with("event: content_block_delta\ndata: {"));
        assert!(broken.text.ends_with("\n\n"));
        let payload = broken.text.trim_end().split_once("data: ").unwrap().1;
        assert!(serde_json::from_str::<Value>(payload).is_err());
    }

    #[test]
    fn gzip_frames_decode_incrementally_and_whole() {
        use flate2::read::GzDecoder;
        use std::io::Read;
        let mut framer = Framer::new(true);
        let first = framer.frame(b"data: 1\n\n").unwrap();
        // A sync-flushed prefix already decodes to the whole first event.
        let mut partial = Vec::new();
        let _ = GzDecoder::new(&first[..]).read_to_end(&mut partial);
        assert_eq!(partial, b"data: 1\n\n");
        let mut all = first;
        all.extend(framer.frame(b"data: 2\n\n").unwrap());
        all.extend(framer.finish().unwrap());
        let mut text = String::new();
        GzDecoder::new(&all[..]).read_to_string(&mut text).unwrap();
        assert_eq!(text, "data: 1\n\ndata: 2\n\n");
        let mut plain = Framer::new(false);
        assert_eq!(plain.frame(b"x").unwrap(), b"x");
        assert!(plain.finish().unwrap().is_empty());
    }

    #[test]
    fn chunk_framing() {
        let mut out = Vec::new();
        write_chunk(&mut out, b"data: [DONE]\n\n").unwrap();
        assert_eq!(out, b"e\r\ndata: [DONE]\n\n\r\n");
    }
}
