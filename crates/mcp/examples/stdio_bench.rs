//! Round-trip benchmark of a stdio MCP server: spawns `COMMAND ARGS...`, initializes, then
//! times `tools/call TOOL {"text": <100 bytes>}`: sequential calls (calls/s, p50, p99) and 8
//! calls in flight (calls/s). A raw line client, so the numbers are the server's.
//!
//! ```text
//! cargo build --release -p quiver -p marker-plugin -p quiver-mcp --examples
//! stdio_bench --tool echo -- target/release/examples/bare_echo
//! stdio_bench --tool marker_echo -- target/release/quiver --config CONFIG serve
//! ```
//! Compare runs taken the same way (e.g. both under `taskset -c 0`), interleaved.
//!
//! Also reads the server's own CPU time per call (`/proc/PID/stat` utime + stime, in the
//! kernel's 100 Hz ticks, over the sequential phase) and its peak RSS (`VmHWM` of
//! `/proc/PID/status`, just before it is told to exit). `--json` adds one JSON line with every
//! figure (what `cargo xtask bench` reads); `--init-only` stops after `initialize` and the first
//! `tools/list` (timing both from the spawn).

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let split =
        args.iter().position(|a| a == "--").expect("usage: stdio_bench [--tool NAME] [--calls N] -- COMMAND ARGS...");
    let (opts, command) = (&args[..split], &args[split + 1..]);
    let opt = |name: &str| opts.iter().position(|a| a == name).and_then(|i| opts.get(i + 1)).cloned();
    let tool = opt("--tool").unwrap_or_else(|| "echo".to_owned());
    let calls: usize = opt("--calls").and_then(|n| n.parse().ok()).unwrap_or(20_000);
    // `--method ping` times the protocol round trip alone (no tool).
    let ping = opt("--method").as_deref() == Some("ping");
    // `--bad-args` sends a number as `text`: the call is refused before the tool runs.
    let bad = opts.iter().any(|a| a == "--bad-args");
    let as_json = opts.iter().any(|a| a == "--json");
    let init_only = opts.iter().any(|a| a == "--init-only");

    let spawned = Instant::now();
    let mut child = Command::new(&command[0])
        .args(&command[1..])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn the server");
    let mut input = child.stdin.take().expect("stdin");
    let mut output = BufReader::new(child.stdout.take().expect("stdout"));
    let mut line = String::new();
    let mut read = |output: &mut BufReader<std::process::ChildStdout>| -> Value {
        line.clear();
        output.read_line(&mut line).expect("read");
        serde_json::from_str(&line).expect("json line")
    };
    let send = |input: &mut std::process::ChildStdin, v: &Value| {
        let mut bytes = serde_json::to_vec(v).expect("encode");
        bytes.push(b'\n');
        input.write_all(&bytes).expect("write");
    };
    send(
        &mut input,
        &json!({"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"stdio-bench","version":"1"}}}),
    );
    let init = read(&mut output);
    assert!(init.get("result").is_some(), "{init}");
    let ready = spawned.elapsed();
    send(&mut input, &json!({"jsonrpc":"2.0","method":"notifications/initialized"}));
    let pid = child.id();
    if init_only {
        // Then the first tools/list, as a client sends it right after initializing.
        send(&mut input, &json!({"jsonrpc":"2.0","id":1,"method":"tools/list"}));
        let list = read(&mut output);
        let listed = spawned.elapsed();
        let tools = list["result"]["tools"].as_array().map_or(0, Vec::len);
        assert!(tools > 0, "{list}");
        let hwm = peak_rss_kib(pid);
        drop(input);
        let _ = child.wait();
        let (init_ms, list_ms) = (ready.as_secs_f64() * 1e3, listed.as_secs_f64() * 1e3);
        println!(
            "{}: spawn->initialized {init_ms:.1} ms | spawn->first tools/list {list_ms:.1} ms ({tools} tools) | peak RSS {hwm} KiB",
            command[0]
        );
        if as_json {
            println!("{}", json!({"init_ms": init_ms, "list_ms": list_ms, "tools": tools, "peak_rss_kib": hwm}));
        }
        return;
    }

    let text = if bad { json!(100) } else { json!("x".repeat(100)) };
    let call = |id: usize| {
        if ping {
            json!({"jsonrpc":"2.0","id":id,"method":"ping"})
        } else {
            json!({"jsonrpc":"2.0","id":id,"method":"tools/call","params":{"name":tool,"arguments":{"text":text}}})
        }
    };
    for id in 1..=1000 {
        send(&mut input, &call(id));
        let r = read(&mut output);
        assert!(bad || r["result"]["isError"] != json!(true), "{r}");
    }
    let mut lat = Vec::with_capacity(calls);
    let cpu_before = cpu_ticks(pid);
    let start = Instant::now();
    for i in 0..calls {
        let t = Instant::now();
        send(&mut input, &call(10_000 + i));
        let _ = read(&mut output);
        lat.push(t.elapsed());
    }
    let seq = start.elapsed();
    let cpu_seq = cpu_ticks(pid) - cpu_before;
    lat.sort();
    let p = |q: f64| lat[((lat.len() as f64 * q) as usize).min(lat.len() - 1)];

    let inflight = 8;
    let start = Instant::now();
    let mut next = 0;
    for _ in 0..inflight {
        send(&mut input, &call(100_000 + next));
        next += 1;
    }
    let mut done = 0;
    while done < calls {
        let _ = read(&mut output);
        done += 1;
        if next < calls {
            send(&mut input, &call(100_000 + next));
            next += 1;
        }
    }
    let par = start.elapsed();
    let hwm = peak_rss_kib(pid);
    drop(input);
    let _ = child.wait();
    let per_s = |d: Duration| calls as f64 / d.as_secs_f64();
    // Ticks are 10 ms (USER_HZ is 100 on Linux).
    let cpu_us = cpu_seq as f64 * 10_000.0 / calls as f64;
    println!(
        "{}: spawn->initialized {:.1} ms | sequential {:.0} calls/s, p50 {} us, p99 {} us | {inflight} in flight {:.0} calls/s",
        command[0],
        ready.as_secs_f64() * 1e3,
        per_s(seq),
        p(0.5).as_micros(),
        p(0.99).as_micros(),
        per_s(par)
    );
    println!("  server CPU {cpu_us:.1} us per sequential call | peak RSS {hwm} KiB");
    if as_json {
        println!(
            "{}",
            json!({
                "init_ms": ready.as_secs_f64() * 1e3,
                "seq_per_s": per_s(seq),
                "p50_us": p(0.5).as_secs_f64() * 1e6,
                "p99_us": p(0.99).as_secs_f64() * 1e6,
                "inflight_per_s": per_s(par),
                "cpu_us_per_call": cpu_us,
                "peak_rss_kib": hwm,
            })
        );
    }
}

/// utime + stime of a process, in clock ticks (`/proc/PID/stat` fields 14 and 15).
fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // The command name (field 2) may hold spaces: count fields after its closing parenthesis.
    let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let num = |i: usize| fields.get(i).and_then(|f| f.parse::<u64>().ok()).unwrap_or(0);
    // After ")": field 3 is index 0, so utime (14) is 11 and stime (15) is 12.
    num(11) + num(12)
}

/// Peak resident set size (`VmHWM`) of a process, in KiB.
fn peak_rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}
