//! Mock LLM vendor speaking the OpenAI and Anthropic wire formats, with
//! faults on demand. See README.md for the fault keys and the admin API.

mod admin;
mod anthropic;
mod counters;
mod embeddings;
mod fault;
mod http;
mod models;
mod openai;
mod ratelimit;
mod reply;
mod router;
mod server;
mod sse;
mod tokens;
mod vendor;

use std::io::Write;
use std::net::TcpListener;
use std::process::ExitCode;
use std::sync::Arc;

const USAGE: &str = "usage: mock-provider [--port N] [--host 127.0.0.1]";

fn main() -> ExitCode {
    let (host, port) = match parse_args(std::env::args().skip(1)) {
        Ok(Some(addr)) => addr,
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
    server::serve(listener, Arc::new(counters::State::default()));
    ExitCode::SUCCESS
}

/// `Ok(None)` means help was asked for.
fn parse_args(mut args: impl Iterator<Item = String>) -> Result<Option<(String, u16)>, String> {
    let (mut host, mut port) = ("127.0.0.1".to_string(), 0u16);
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
            "-h" | "--help" => return Ok(None),
            other => return Err(format!("unknown argument `{other}`")),
        }
    }
    Ok(Some((host, port)))
}

#[cfg(test)]
mod tests {
    use super::parse_args;

    fn parse(args: &[&str]) -> Result<Option<(String, u16)>, String> {
        parse_args(args.iter().map(|s| s.to_string()))
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
