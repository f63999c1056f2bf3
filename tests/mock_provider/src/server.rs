//! Accept loop and per-connection keep-alive loop, one thread per connection.

use crate::counters::State;
use crate::http::{self, Body, Connection, ReadError, Response};
use crate::router;
use crate::sse::{self, Outcome};
use std::io::{BufReader, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

const IDLE_TIMEOUT: Duration = Duration::from_secs(120);
const WRITE_TIMEOUT: Duration = Duration::from_secs(60);

pub fn serve(listener: TcpListener, state: Arc<State>) {
    let mut accepted = 0;
    for conn in listener.incoming() {
        let Ok(stream) = conn else { continue };
        let state = Arc::clone(&state);
        accepted += 1;
        let info = Arc::new(Connection::new(accepted));
        let spawned = std::thread::Builder::new().name("mock-conn".into()).stack_size(1 << 20).spawn(move || {
            connection(stream, &state, &info);
            info.open.store(false, Ordering::SeqCst);
        });
        if let Err(e) = spawned {
            eprintln!("mock-provider: cannot spawn connection thread: {e}");
        }
    }
}

fn connection(stream: TcpStream, state: &State, info: &Arc<Connection>) {
    let _ = stream.set_nodelay(true);
    let _ = stream.set_read_timeout(Some(IDLE_TIMEOUT));
    let _ = stream.set_write_timeout(Some(WRITE_TIMEOUT));
    let Ok(mut writer) = stream.try_clone() else { return };
    let mut reader = BufReader::with_capacity(16 * 1024, stream);
    loop {
        let mut req = match http::read_request(&mut reader, &mut writer) {
            Ok(req) => req,
            Err(ReadError::Closed) => return,
            Err(ReadError::TooLarge { path }) => {
                let _ = send(&mut writer, router::too_large(&path), false);
                drain_then_close(&mut reader);
                return;
            }
            Err(ReadError::Bad(message)) => {
                let resp = crate::openai::invalid(&format!("mock-provider: malformed HTTP request: {message}"));
                let _ = send(&mut writer, resp, false);
                return;
            }
        };
        info.requests.fetch_add(1, Ordering::SeqCst);
        req.connection = Some(info.clone());
        let resp = router::route(state, &req);
        match send(&mut writer, resp, req.keep_alive) {
            Ok(Outcome::KeepOpen) if req.keep_alive => {}
            _ => return,
        }
    }
}

fn send(w: &mut TcpStream, resp: Response, keep_alive: bool) -> std::io::Result<Outcome> {
    let t = resp.timing;
    sse::pause(t.delay_first_ms);
    match &resp.body {
        Body::Full { content_type, bytes } => {
            let encoded;
            let bytes = if resp.gzip {
                encoded = sse::gzip(bytes)?;
                &encoded
            } else {
                bytes
            };
            if t.chunked {
                w.write_all(&http::head(&resp, content_type, None, keep_alive))?;
                for piece in bytes.chunks(64 * 1024) {
                    sse::pause(t.delay_ms);
                    sse::write_chunk(w, piece)?;
                }
                w.write_all(b"0\r\n\r\n")?;
                return Ok(Outcome::KeepOpen);
            }
            let mut out = http::head(&resp, content_type, Some(bytes.len()), keep_alive);
            if t.delay_ms > 0 {
                w.write_all(&out)?;
                sse::pause(t.delay_ms);
                w.write_all(bytes)?;
            } else {
                out.extend_from_slice(bytes);
                w.write_all(&out)?;
            }
            Ok(Outcome::KeepOpen)
        }
        Body::Sse(events) => {
            w.write_all(&http::head(&resp, "text/event-stream", None, keep_alive))?;
            sse::stream(w, events, &t, resp.gzip)
        }
    }
}

/// Reads and discards an oversized body briefly so the client sees the 413, not a reset.
fn drain_then_close(reader: &mut BufReader<TcpStream>) {
    let _ = reader.get_ref().shutdown(Shutdown::Write);
    let _ = reader.get_ref().set_read_timeout(Some(Duration::from_millis(200)));
    let deadline = Instant::now() + Duration::from_secs(2);
    let mut buf = [0u8; 64 * 1024];
    while Instant::now() < deadline {
        match reader.read(&mut buf) {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
    }
}
