//! Round-trip benchmark of a streamable-HTTP MCP server: opens SESSIONS sessions (one keep-alive
//! HTTP/1.1 connection and one client thread each), initializes them, then every session calls
//! `tools/call TOOL {"text": <100 bytes>}` back to back for the same wall time; prints the total
//! calls per second. A raw HTTP client (std only), so the figures are the server's.
//!
//! ```text
//! http_bench --url http://127.0.0.1:8766/mcp --tool echo --sessions 8 --seconds 3 [--json] [--token TOKEN]
//! ```
//! `--token` sends `Authorization: Bearer TOKEN` with every request (a server with `server.auth`).
//! Compare runs taken the same way (same pinning, interleaved).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

struct Session {
    reader: BufReader<TcpStream>,
    writer: TcpStream,
    host: String,
    path: String,
    id: Option<String>,
    /// `Authorization: Bearer ...` for every request, when given.
    token: Option<String>,
}

impl Session {
    fn open(host: &str, path: &str, token: Option<String>) -> Session {
        let stream = TcpStream::connect(host).expect("connect to the server");
        stream.set_nodelay(true).expect("nodelay");
        Session {
            reader: BufReader::new(stream.try_clone().expect("clone")),
            writer: stream,
            host: host.to_owned(),
            path: path.to_owned(),
            id: None,
            token,
        }
    }

    /// Calls `tool` once and checks that it was served: a reply with a result that is not an
    /// error, so a fast refusal (a rate limit, a refused call) never counts as a call served.
    fn call(&mut self, id: u64, tool: &str, text: &str) {
        let r = self.post(
            &json!({"jsonrpc":"2.0","id":id,"method":"tools/call","params":{"name":tool,"arguments":{"text":text}}}),
        );
        assert!(r.get("result").is_some() && r["result"]["isError"] != json!(true), "{r}");
    }

    /// Ends the session on the server (`DELETE` with its id), as a client that is done should:
    /// a server counts open sessions against its limit until they end or expire. A server that
    /// does not let clients end sessions answers 405, which is accepted.
    fn close(&mut self) {
        if self.id.is_none() {
            return;
        }
        let head = self.head("DELETE", "", 0);
        self.writer.write_all(head.as_bytes()).expect("write");
        let (status, _, payload) = self.read_response();
        assert!((200..300).contains(&status) || status == 405, "HTTP {status}: {}", String::from_utf8_lossy(&payload));
    }

    /// A request's line and headers, up to and with the blank line: the session's id and
    /// protocol version once it has one, and the bearer token when given.
    fn head(&self, method: &str, extra: &str, content_length: usize) -> String {
        let mut head = format!(
            "{method} {} HTTP/1.1\r\nHost: {}\r\n{extra}Content-Length: {content_length}\r\n",
            self.path, self.host
        );
        if let Some(token) = &self.token {
            head.push_str(&format!("Authorization: Bearer {token}\r\n"));
        }
        if let Some(id) = &self.id {
            head.push_str(&format!("Mcp-Session-Id: {id}\r\nMcp-Protocol-Version: 2025-11-25\r\n"));
        }
        head.push_str("\r\n");
        head
    }

    /// POSTs one JSON-RPC message; returns the JSON-RPC reply (or `Null` for a notification).
    fn post(&mut self, body: &Value) -> Value {
        let body = serde_json::to_vec(body).expect("encode");
        let head = self.head(
            "POST",
            "Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n",
            body.len(),
        );
        let mut request = head.into_bytes();
        request.extend_from_slice(&body);
        self.writer.write_all(&request).expect("write");
        let (status, headers, payload) = self.read_response();
        assert!((200..300).contains(&status), "HTTP {status}: {}", String::from_utf8_lossy(&payload));
        if let Some(id) = header(&headers, "mcp-session-id") {
            self.id = Some(id.to_owned());
        }
        if payload.is_empty() {
            return Value::Null;
        }
        let text = String::from_utf8_lossy(&payload);
        if header(&headers, "content-type").is_some_and(|c| c.starts_with("text/event-stream")) {
            // The reply is the `data:` line of an event carrying a JSON-RPC response.
            for line in text.lines() {
                if let Some(data) = line.strip_prefix("data:")
                    && let Ok(v) = serde_json::from_str::<Value>(data.trim())
                    && (v.get("result").is_some() || v.get("error").is_some())
                {
                    return v;
                }
            }
            return Value::Null;
        }
        serde_json::from_str(&text).expect("json reply")
    }

    fn read_response(&mut self) -> (u16, Vec<(String, String)>, Vec<u8>) {
        let mut line = String::new();
        self.reader.read_line(&mut line).expect("status line");
        let status: u16 = line.split_whitespace().nth(1).and_then(|s| s.parse().ok()).expect("status code");
        let mut headers = Vec::new();
        loop {
            line.clear();
            self.reader.read_line(&mut line).expect("header");
            let l = line.trim_end();
            if l.is_empty() {
                break;
            }
            if let Some((k, v)) = l.split_once(':') {
                headers.push((k.trim().to_ascii_lowercase(), v.trim().to_owned()));
            }
        }
        let mut body = Vec::new();
        if header(&headers, "transfer-encoding").is_some_and(|t| t.eq_ignore_ascii_case("chunked")) {
            loop {
                line.clear();
                self.reader.read_line(&mut line).expect("chunk size");
                let size = usize::from_str_radix(line.trim().split(';').next().unwrap_or("0"), 16).expect("chunk size");
                if size == 0 {
                    line.clear();
                    self.reader.read_line(&mut line).expect("last chunk end");
                    break;
                }
                let start = body.len();
                body.resize(start + size, 0);
                self.reader.read_exact(&mut body[start..]).expect("chunk");
                line.clear();
                self.reader.read_line(&mut line).expect("chunk end");
            }
        } else if let Some(n) = header(&headers, "content-length").and_then(|n| n.parse::<usize>().ok()) {
            body.resize(n, 0);
            self.reader.read_exact(&mut body).expect("body");
        }
        (status, headers, body)
    }
}

fn header<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let opt = |name: &str| args.iter().position(|a| a == name).and_then(|i| args.get(i + 1)).cloned();
    let url = opt("--url").expect("usage: http_bench --url http://HOST:PORT/PATH [--tool NAME] [--sessions N]");
    let tool = opt("--tool").unwrap_or_else(|| "echo".to_owned());
    let sessions: usize = opt("--sessions").and_then(|n| n.parse().ok()).unwrap_or(1);
    let seconds: f64 = opt("--seconds").and_then(|n| n.parse().ok()).unwrap_or(3.0);
    let as_json = args.iter().any(|a| a == "--json");
    let token = opt("--token");
    let rest = url.strip_prefix("http://").expect("an http:// URL");
    let (host, path) = rest.split_once('/').map(|(h, p)| (h.to_owned(), format!("/{p}"))).expect("URL with a path");

    let text = "x".repeat(100);
    let mut opened: Vec<Session> = (0..sessions)
        .map(|_| {
            let mut s = Session::open(&host, &path, token.clone());
            let init = s.post(&json!({"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"http-bench","version":"1"}}}));
            assert!(init.get("result").is_some(), "{init}");
            s.post(&json!({"jsonrpc":"2.0","method":"notifications/initialized"}));
            s
        })
        .collect();
    // Warm-up: a few calls per session, checked.
    for s in &mut opened {
        for id in 1..=50 {
            s.call(id, &tool, &text);
        }
    }
    let deadline = Duration::from_secs_f64(seconds);
    let start = Instant::now();
    let threads: Vec<_> = opened
        .into_iter()
        .map(|mut s| {
            let tool = tool.clone();
            let text = text.clone();
            std::thread::spawn(move || {
                let mut n = 0u64;
                while start.elapsed() < deadline {
                    s.call(1000 + n, &tool, &text);
                    n += 1;
                }
                (n, s)
            })
        })
        .collect();
    let (mut calls, mut done) = (0u64, Vec::with_capacity(sessions));
    for t in threads {
        let (n, s) = t.join().expect("session thread");
        calls += n;
        done.push(s);
    }
    let elapsed = start.elapsed().as_secs_f64();
    // After the clock: ending the sessions is not part of the calls measured.
    for s in &mut done {
        s.close();
    }
    let per_s = calls as f64 / elapsed;
    println!("{url}: {sessions} sessions, {per_s:.0} calls/s ({calls} calls in {elapsed:.2} s)");
    if as_json {
        println!("{}", json!({"sessions": sessions, "per_s": per_s, "calls": calls}));
    }
}
