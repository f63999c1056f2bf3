//! Mock LLM vendor speaking the OpenAI and Anthropic wire formats, with
//! faults on demand. See README.md for the fault keys and the admin API.

mod admin;
mod anthropic;
mod base64;
mod counters;
mod embeddings;
mod fault;
mod http;
mod models;
mod openai;
mod prompt_cache;
mod ratelimit;
mod reply;
mod responses;
mod router;
mod server;
mod sse;
mod thinking;
mod tokens;
mod vendor;

use std::io::Write;
use std::net::TcpListener;
use std::process::ExitCode;
use std::sync::Arc;

const USAGE: &str = "usage: mock-provider [--port N] [--host 127.0.0.1] [--stream-pace-ms N]
  --stream-pace-ms N  pause N ms before each SSE event unless the model's faults set delay_ms (default 0)";

struct Options {
    host: String,
    port: u16,
    stream_pace_ms: u64,
}

fn main() -> ExitCode {
    let Options { host, port, stream_pace_ms } = match parse_args(std::env::args().skip(1)) {
        Ok(Some(options)) => options,
        Ok(None) => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("mock-provider: {e}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let listener = match TcpListener::bind((host.as_str(), port)) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("mock-provider: cannot bind {host}:{port}: {e}");
            return ExitCode::FAILURE;
        }
    };
    let addr = listener.local_addr().map_or(format!("{host}:{port}"), |a| a.to_string());
    let mut stdout = std::io::stdout();
    // Harnesses block on this exact line to learn the port.
    let _ = writeln!(stdout, "mock-provider listening on {addr}");
    let _ = stdout.flush();
    server::serve(listener, Arc::new(counters::State::with_stream_pace(stream_pace_ms)));
    ExitCode::SUCCESS
}

/// `Ok(None)` means help was asked for.
fn parse_args(mut args: impl Iterator<Item = String>) -> Result<Option<Options>, String> {
    let (mut host, mut port, mut stream_pace_ms) = ("127.0.0.1".to_string(), 0u16, 0u64);
    while let Some(arg) = args.next() {
        let (flag, inline) = match arg.split_once('=') {
            Some((f, v)) => (f.to_string(), Some(v.to_string())),
            None => (arg, None),
        };
        let mut value = || inline.clone().or_else(|| args.next()).ok_or(format!("{flag} needs a value"));
        match flag.as_str() {
            "--port" => {
                let v = value()?;
                port = v.parse().map_err(|_| format!("bad port `{v}`"))?;
            }
            "--host" => host = value()?,
            "--stream-pace-ms" => {
                let v = value()?;
                stream_pace_ms = v.parse().map_err(|_| format!("bad --stream-pace-ms `{v}`"))?;
            }
            "-h" | "--help" => return Ok(None),
            other => return Err(format!("unknown argument `{other}`")),
        }
    }
    Ok(Some(Options { host, port, stream_pace_ms }))
}

#[cfg(test)]
mod tests {
    use super::parse_args;

    fn parse(args: &[&str]) -> Result<Option<(String, u16)>, String> {
        parse_args(args.iter().map(|s| s.to_string())).map(|o| o.map(|o| (o.host, o.port)))
    }

    #[test]
    fn stream_pace() {
        let pace = |args: &[&str]| parse_args(args.iter().map(|s| s.to_string())).map(|o| o.unwrap().stream_pace_ms);
        assert_eq!(pace(&[]), Ok(0));
        assert_eq!(pace(&["--stream-pace-ms", "25"]), Ok(25));
        assert!(pace(&["--stream-pace-ms", "soon"]).is_err());
    }

    #[test]
    fn cli() {
        assert_eq!(parse(&[]), Ok(Some(("127.0.0.1".into(), 0))));
        assert_eq!(parse(&["--port", "8080", "--host=0.0.0.0"]), Ok(Some(("0.0.0.0".into(), 8080))));
        assert_eq!(parse(&["--port=7"]), Ok(Some(("127.0.0.1".into(), 7))));
        assert!(parse(&["--port"]).is_err());
        assert!(parse(&["--port", "x"]).is_err());
        assert!(parse(&["--bogus"]).is_err());
        assert_eq!(parse(&["--help"]), Ok(None));
    }
}
