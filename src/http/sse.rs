//! Incremental server-sent-events parser (WHATWG event-stream rules) fed arbitrary byte chunks.
//!
//! Lines end at `\r\n`, `\n` or `\r`, and a chunk may stop anywhere, including between `\r` and `\n`
//! or inside a multi-byte UTF-8 character: only whole lines are decoded. Each byte is scanned
//! once however the line is split, and a line longer than [`MAX_LINE_BYTES`] stops the parser.

/// Longer than any vendor's event line (a whole answer in one `data:` line stays far below it),
/// and far below an isolate's memory.
pub const MAX_LINE_BYTES: usize = 16 * 1024 * 1024;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SseEvent {
    /// The `event:` field; `None` when absent or empty (the spec's default "message").
    pub event: Option<String>,
    pub data: String,
}

#[derive(Debug, Default)]
pub struct SseParser {
    buf: Vec<u8>,
    pos: usize,
    /// Bytes of `buf` before this index hold no line end: the next search starts here.
    scanned: usize,
    /// A line outgrew `MAX_LINE_BYTES`: nothing more is parsed.
    overflowed: bool,
    /// The previous chunk ended in `\r`: a `\n` starting the next one belongs to that line end.
    skip_lf: bool,
    seen_first_line: bool,
    event: String,
    data: String,
}

impl SseParser {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn feed(&mut self, chunk: &[u8]) {
        if self.overflowed {
            return;
        }
        if self.pos > 0 && self.pos * 2 >= self.buf.len() {
            self.buf.drain(..self.pos);
            self.scanned = self.scanned.saturating_sub(self.pos);
            self.pos = 0;
        }
        self.buf.extend_from_slice(chunk);
    }

    /// Whether a line outgrew [`MAX_LINE_BYTES`] (the stream is then unusable).
    pub fn overflowed(&self) -> bool {
        self.overflowed
    }

    /// The next complete event in what was fed so far.
    pub fn next_event(&mut self) -> Option<SseEvent> {
        if self.overflowed {
            return None;
        }
        while let Some(line) = self.next_line() {
            if let Some(ev) = self.process_line(&line) {
                return Some(ev);
            }
        }
        None
    }

    /// End of stream: an unterminated last line is taken as a line, and an event whose blank
    /// line never came is still dispatched (lenient, for vendors that omit the final blank line).
    pub fn finish(&mut self) -> Option<SseEvent> {
        if let Some(ev) = self.next_event() {
            return Some(ev);
        }
        if self.pos < self.buf.len() && !self.overflowed {
            let rest = String::from_utf8_lossy(&self.buf[self.pos..]).into_owned();
            self.pos = self.buf.len();
            if let Some(ev) = self.process_line(&rest) {
                return Some(ev);
            }
        }
        self.dispatch()
    }

    fn next_line(&mut self) -> Option<String> {
        if self.skip_lf && self.pos < self.buf.len() {
            self.skip_lf = false;
            if self.buf[self.pos] == b'\n' {
                self.pos += 1;
            }
        }
        let from = self.scanned.max(self.pos);
        let Some(found) = self.buf[from..].iter().position(|&b| b == b'\n' || b == b'\r') else {
            self.scanned = self.buf.len();
            if self.buf.len() - self.pos > MAX_LINE_BYTES {
                self.overflowed = true;
                self.buf = Vec::new();
                (self.pos, self.scanned) = (0, 0);
            }
            return None;
        };
        let end = from - self.pos + found;
        let rest = &self.buf[self.pos..];
        let line = String::from_utf8_lossy(&rest[..end]).into_owned();
        let mut next = self.pos + end + 1;
        if rest[end] == b'\r' {
            match rest.get(end + 1) {
                Some(b'\n') => next += 1,
                Some(_) => {}
                None => self.skip_lf = true,
            }
        }
        self.pos = next;
        self.scanned = next;
        Some(line)
    }

    fn process_line(&mut self, line: &str) -> Option<SseEvent> {
        let line = if self.seen_first_line { line } else { line.strip_prefix('\u{feff}').unwrap_or(line) };
        self.seen_first_line = true;
        if line.is_empty() {
            return self.dispatch();
        }
        if line.starts_with(':') {
            return None;
        }
        let (field, value) = match line.split_once(':') {
            Some((f, v)) => (f, v.strip_prefix(' ').unwrap_or(v)),
            None => (line, ""),
        };
        match field {
            "event" => self.event = value.to_string(),
            "data" => {
                self.data.push_str(value);
                self.data.push('\n');
            }
            _ => {}
        }
        None
    }

    fn dispatch(&mut self) -> Option<SseEvent> {
        let event = std::mem::take(&mut self.event);
        if self.data.is_empty() {
            return None;
        }
        let mut data = std::mem::take(&mut self.data);
        data.pop();
        Some(SseEvent { event: (!event.is_empty()).then_some(event), data })
    }
}

/// Writes one event's data as SSE (`data: …\n\n`), one `data:` line per line of `data`.
pub fn write_data(out: &mut Vec<u8>, data: &str) {
    for line in data.split('\n') {
        out.extend_from_slice(b"data: ");
        out.extend_from_slice(line.as_bytes());
        out.push(b'\n');
    }
    out.push(b'\n');
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_all(chunks: &[&[u8]]) -> Vec<SseEvent> {
        let mut p = SseParser::new();
        let mut out = Vec::new();
        for c in chunks {
            p.feed(c);
            while let Some(ev) = p.next_event() {
                out.push(ev);
            }
        }
        while let Some(ev) = p.finish() {
            out.push(ev);
        }
        out
    }

    fn ev(event: Option<&str>, data: &str) -> SseEvent {
        SseEvent { event: event.map(str::to_string), data: data.to_string() }
    }

    #[test]
    fn fields_comments_and_multiline_data() {
        let text = b": keepalive\nevent: message_start\ndata: {\"a\":1}\n\ndata:x\ndata: y\nid: 7\nretry: 10\n\nevent: only\n\n";
        assert_eq!(parse_all(&[text]), vec![ev(Some("message_start"), "{\"a\":1}"), ev(None, "x\ny")]);
    }

    #[test]
    fn every_line_ending_and_split_cr_lf() {
        let want = vec![ev(Some("e"), "1"), ev(None, "2"), ev(None, "3")];
        assert_eq!(parse_all(&[b"event: e\r\ndata: 1\r\n\r\ndata: 2\n\ndata: 3\r\r"]), want);
        assert_eq!(parse_all(&[b"event: e\r", b"\ndata: 1\r", b"\n\r", b"\ndata: 2\n", b"\ndata: 3\r", b"\r"]), want);
    }

    #[test]
    fn utf8_split_inside_a_character() {
        let text = "data: 你好🙂\n\n".as_bytes();
        for cut in 0..text.len() {
            assert_eq!(parse_all(&[&text[..cut], &text[cut..]]), vec![ev(None, "你好🙂")], "cut at {cut}");
        }
    }

    #[test]
    fn bom_stripped_once_and_empty_data_dispatches() {
        assert_eq!(parse_all(&[b"\xEF\xBB", b"\xBFdata\n\n"]), vec![ev(None, "")]);
    }

    #[test]
    fn finish_dispatches_an_unterminated_event() {
        assert_eq!(parse_all(&[b"data: [DONE]"]), vec![ev(None, "[DONE]")]);
        assert_eq!(parse_all(&[b"data: a\n"]), vec![ev(None, "a")]);
        assert_eq!(parse_all(&[b"event: x\n"]), vec![]);
    }

    #[test]
    fn a_long_line_in_small_chunks_is_scanned_once() {
        // 4 MiB in 1-byte chunks: quadratic rescanning would take minutes, linear takes milliseconds.
        let mut p = SseParser::new();
        p.feed(b"data: ");
        let started = std::time::Instant::now();
        for _ in 0..4 * 1024 * 1024 {
            p.feed(b"x");
            assert!(p.next_event().is_none());
        }
        p.feed(b"\n\n");
        assert_eq!(p.next_event().map(|e| e.data.len()), Some(4 * 1024 * 1024));
        assert!(started.elapsed() < std::time::Duration::from_secs(20), "took {:?}", started.elapsed());
    }

    #[test]
    fn a_line_over_the_cap_stops_the_parser() {
        let mut p = SseParser::new();
        p.feed(b"data: ok\n\n");
        assert_eq!(p.next_event(), Some(ev(None, "ok")));
        let block = vec![b'x'; 1024 * 1024];
        for _ in 0..=MAX_LINE_BYTES / block.len() {
            p.feed(&block);
            assert!(p.next_event().is_none());
        }
        assert!(p.overflowed());
        p.feed(b"\n\ndata: later\n\n");
        assert_eq!(p.next_event(), None, "nothing parsed after the overflow");
        assert_eq!(p.finish(), None);
        assert!(p.buf.is_empty(), "the oversized line is not kept");
    }

    #[test]
    fn write_data_splits_lines() {
        let mut out = Vec::new();
        write_data(&mut out, "a\nb");
        assert_eq!(out, b"data: a\ndata: b\n\n");
    }
}
