//! The local HTTP test endpoint `contract-test` starts for HTTP adapter bundles
//! (`tests/adapters/http-items`): a tiny items API on `127.0.0.1` (a free port), one thread per
//! connection, one request per connection. It lives only as long as the xtask run.
//!
//! - `GET /api/items/NAME`: the item (`{name, price, stock}`), or 404.
//! - `GET /api/items?q=TEXT&limit=N`: `{q, limit, items: [names containing TEXT]}`.
//! - `POST /api/items` with a JSON body `{name, price}`: 201 `{created: body}`, or 409 when the
//!   name exists.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};

use anyhow::{Context, Result};
use percent_encoding::percent_decode_str;
use serde_json::{Value, json};

const ITEMS: &[(&str, f64, u32)] = &[("apple", 1.25, 10), ("grape", 3.0, 4), ("pear", 0.8, 0)];

/// Starts the endpoint; returns its base URL (`http://127.0.0.1:PORT`).
pub fn start() -> Result<String> {
    let listener = TcpListener::bind("127.0.0.1:0").context("cannot start the HTTP test endpoint")?;
    let addr = listener.local_addr()?;
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            std::thread::spawn(move || {
                let _ = serve(stream);
            });
        }
    });
    Ok(format!("http://{addr}"))
}

fn decode(s: &str) -> String {
    percent_decode_str(&s.replace('+', " ")).decode_utf8_lossy().into_owned()
}

fn serve(mut stream: TcpStream) -> std::io::Result<()> {
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut line = String::new();
    reader.read_line(&mut line)?;
    let mut len = 0usize;
    loop {
        let mut h = String::new();
        if reader.read_line(&mut h)? == 0 || h == "\r\n" {
            break;
        }
        if let Some(v) = h.to_ascii_lowercase().strip_prefix("content-length:") {
            len = v.trim().parse().unwrap_or(0);
        }
    }
    let mut body = vec![0; len.min(1 << 20)];
    reader.read_exact(&mut body)?;
    let mut parts = line.split(' ');
    let (method, target) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    let (status, reply) = route(method, path, query, &body);
    let reply = reply.to_string();
    write!(
        stream,
        "HTTP/1.1 {status} {}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{reply}",
        if status < 300 { "OK" } else { "Error" },
        reply.len()
    )
}

fn route(method: &str, path: &str, query: &str, body: &[u8]) -> (u16, Value) {
    let item = |(name, price, stock): &(&str, f64, u32)| json!({"name": name, "price": price, "stock": stock});
    match (method, path) {
        ("GET", "/api/items") => {
            let mut q = String::new();
            let mut limit = Value::Null;
            for pair in query.split('&').filter(|p| !p.is_empty()) {
                let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
                match decode(k).as_str() {
                    "q" => q = decode(v),
                    "limit" => limit = decode(v).parse::<u64>().map(Value::from).unwrap_or(Value::Null),
                    _ => {}
                }
            }
            let max = limit.as_u64().unwrap_or(10) as usize;
            let items: Vec<&str> = ITEMS.iter().map(|i| i.0).filter(|n| n.contains(q.as_str())).take(max).collect();
            (200, json!({"q": q, "limit": limit, "items": items}))
        }
        ("POST", "/api/items") => match serde_json::from_slice::<Value>(body) {
            Ok(v) if ITEMS.iter().any(|i| Some(i.0) == v["name"].as_str()) => {
                (409, json!({"error": "an item with this name exists"}))
            }
            Ok(v) if v["name"].is_string() => (201, json!({"created": v})),
            _ => (400, json!({"error": "send a JSON object with a name"})),
        },
        ("GET", p) if p.starts_with("/api/items/") => {
            let name = decode(&p["/api/items/".len()..]);
            match ITEMS.iter().find(|i| i.0 == name) {
                Some(i) => (200, item(i)),
                None => (404, json!({"error": format!("no item named {name:?}")})),
            }
        }
        _ => (404, json!({"error": "no such route"})),
    }
}
