//! `strata viz --serve`: the page over HTTP on a loopback address, with the snapshot held in
//! memory, so that zooming into a window of a long trace gets that window's exact blocks.
//! A page opened from a file cannot read the snapshot beside it; this one asks the server.
//!
//! Two requests are answered: `GET /` (the page, the whole trace) and
//! `GET /window?from=A&to=B` (the page's data for trace entries `A..B`, as JSON, itself
//! summarised when it is still too long to hold every allocation). Anything else is a 404.
//! The server listens on loopback addresses only and answers one request at a time.

use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};

use strata::alloc::caching::Snapshot;

use super::{html, viz_window, VizOptions};

/// The most bytes of a request's head that are read.
const MAX_HEAD: usize = 8 * 1024;

/// Why the server cannot start.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The address is not a loopback one.
    #[error(
        "{0} is not a loopback address: the page's server only listens on this machine \
         (use 127.0.0.1:PORT or [::1]:PORT)"
    )]
    NotLoopback(SocketAddr),
    /// The address cannot be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// Why.
        source: io::Error,
    },
}

/// What the server answers one request with: status, content type, body.
fn answer(
    snapshot: &Snapshot,
    title: &str,
    options: &VizOptions,
    target: &str,
) -> (u16, &'static str, Vec<u8>) {
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    match path {
        "/" | "/index.html" => {
            let data = viz_window(snapshot, 0, title, None, options);
            (200, "text/html; charset=utf-8", html(&data).into_bytes())
        }
        "/window" => match window_of(query) {
            Ok((from, to)) => {
                let data = viz_window(snapshot, 0, title, Some(from..to), options);
                match serde_json::to_vec(&data) {
                    Ok(body) => (200, "application/json", body),
                    Err(e) => (500, "text/plain", e.to_string().into_bytes()),
                }
            }
            Err(e) => (400, "text/plain", e.into_bytes()),
        },
        _ => (
            404,
            "text/plain",
            b"not found: try / or /window?from=A&to=B".to_vec(),
        ),
    }
}

/// `from=A&to=B` read as entries.
fn window_of(query: &str) -> Result<(usize, usize), String> {
    let (mut from, mut to) = (None, None);
    for pair in query.split('&') {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        let value = || {
            value
                .parse::<usize>()
                .map_err(|_| format!("`{key}={value}`: expected a trace entry"))
        };
        match key {
            "from" => from = Some(value()?),
            "to" => to = Some(value()?),
            _ => {}
        }
    }
    match (from, to) {
        (Some(from), Some(to)) if from < to => Ok((from, to)),
        (Some(_), Some(_)) => Err("`from` must be before `to`".to_owned()),
        _ => Err("expected /window?from=A&to=B".to_owned()),
    }
}

/// Reads one request's target (`GET TARGET HTTP/1.1`) and answers it.
fn handle(
    stream: TcpStream,
    snapshot: &Snapshot,
    title: &str,
    options: &VizOptions,
) -> io::Result<()> {
    let mut reader = BufReader::new(stream.try_clone()?.take(MAX_HEAD as u64));
    let mut line = String::new();
    reader.read_line(&mut line)?;
    // The rest of the head, up to the blank line, is read and ignored.
    let mut header = String::new();
    while reader.read_line(&mut header)? > 2 {
        header.clear();
    }
    let mut words = line.split_whitespace();
    let (status, kind, body) = match (words.next(), words.next()) {
        (Some("GET"), Some(target)) => answer(snapshot, title, options, target),
        _ => (405, "text/plain", b"only GET is answered".to_vec()),
    };
    let reason = match status {
        200 => "OK",
        400 => "Bad Request",
        404 => "Not Found",
        405 => "Method Not Allowed",
        _ => "Internal Server Error",
    };
    let mut out = stream;
    write!(
        out,
        "HTTP/1.1 {status} {reason}\r\nContent-Type: {kind}\r\nContent-Length: {}\r\n\
         Cache-Control: no-store\r\nConnection: close\r\n\r\n",
        body.len()
    )?;
    out.write_all(&body)?;
    out.flush()
}

/// Listens on `addr` (a loopback address; port 0 picks a free one), calls `ready` with the
/// address bound, and answers requests until the process ends.
pub fn serve(
    snapshot: &Snapshot,
    title: &str,
    addr: SocketAddr,
    options: &VizOptions,
    ready: impl FnOnce(SocketAddr),
) -> Result<(), ServeError> {
    if !addr.ip().is_loopback() {
        return Err(ServeError::NotLoopback(addr));
    }
    let bind = |source| ServeError::Bind { addr, source };
    let listener = TcpListener::bind(addr).map_err(bind)?;
    ready(listener.local_addr().map_err(bind)?);
    // A connection that fails is that client's problem; the server goes on.
    for stream in listener.incoming().flatten() {
        let _ = handle(stream, snapshot, title, options);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_are_read_from_the_query() {
        assert_eq!(window_of("from=10&to=50"), Ok((10, 50)));
        assert_eq!(window_of("to=50&from=10&x=1"), Ok((10, 50)));
        assert!(window_of("from=50&to=10").is_err());
        assert!(window_of("from=a&to=10").is_err());
        assert!(window_of("").is_err());
    }

    #[test]
    fn only_loopback_addresses_are_served() {
        let a = strata::alloc::CachingAllocator::new(strata::alloc::VirtualBacking::new(1 << 20));
        let s = a.snapshot();
        let addr: SocketAddr = "0.0.0.0:0".parse().unwrap();
        let e = serve(&s, "t", addr, &VizOptions::default(), |_| {}).unwrap_err();
        assert!(e.to_string().contains("not a loopback address"), "{e}");
    }
}
