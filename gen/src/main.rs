//! `wanlab-gen`: UDP traffic generator, sink, echo responder and RTT probe
//! built on sendmmsg/recvmmsg, for wanlab's fidelity and capacity benches.
//!
//! Subcommands: `send`, `sink`, `echo`, `ping` (see `wanlab-gen help`).

use send::SendCfg;
use sink::StopRule;
use std::process::ExitCode;
use std::time::Duration;
use wanlab_gen::args::Args;
use wanlab_gen::pattern::{Dist, Pattern};
use wanlab_gen::{echo, json, net, packet, ping, send, sink};

const USAGE: &str = "\
wanlab-gen: sendmmsg/recvmmsg UDP generator and sink

  wanlab-gen send --dst IP:PORT --size BYTES (--rate PPS | --bitrate BPS | --max)
                  (--duration SECS | --count N) [--batch 64] [--tos N] [--bind IP:PORT]
                  [--bitrate-counts frame|ip|payload] [--fin N] [--wait-signal] [--json]
                  [--pattern cbr|poisson|exponential|pareto [--burst SECS --idle SECS]
                   [--shape X] [--seed N]]
  wanlab-gen sink --bind IP:PORT (--duration SECS | --idle-exit SECS) [--interval SECS]
                  [--fin-exit SECS] [--batch 256] [--json]
  wanlab-gen echo --bind IP:PORT (--duration SECS | --idle-exit SECS) [--batch 64] [--json]
  wanlab-gen ping --dst IP:PORT --size BYTES (--rate PPS | --bitrate BPS) (--duration SECS | --count N)
                  [--wait SECS] [--batch 64] [--tos N] [--json]

--size is the UDP payload (>= 20); the Ethernet frame is size + 42 bytes (+ 62 over IPv6:
IP:PORT may be [IPv6]:PORT).
--bitrate counts Ethernet frame bytes by default (--bitrate-counts).
--wait-signal: set everything up, then start sending on SIGUSR1.
--pattern: random departures (ns-2's sources): poisson = exponential gaps at the mean
rate; exponential/pareto = on/off bursts at the rate, of mean --burst seconds, separated
by idle times of mean --idle seconds (Pareto --shape, default 1.5); --seed fixes the draws.
Datagrams carry a sequence number and a CLOCK_MONOTONIC send timestamp;
the sink reports loss (sequence gaps), reordering, duplicates, one-way delay
and throughput. Numbers accept k/M/G suffixes (decimal).";

fn main() -> ExitCode {
    let argv: Vec<String> = std::env::args().collect();
    let Some(cmd) = argv.get(1) else {
        eprintln!("{USAGE}");
        return ExitCode::from(2);
    };
    let rest = &argv[2..];
    wanlab_gen::stop::install();
    let r = match cmd.as_str() {
        "send" => cmd_send(rest),
        "sink" => cmd_sink(rest),
        "echo" => cmd_echo(rest),
        "ping" => cmd_ping(rest),
        "help" | "--help" | "-h" => {
            println!("{USAGE}");
            Ok(())
        }
        other => Err(format!(
            "unknown subcommand '{other}' (send, sink, echo, ping, help)"
        )),
    };
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("wanlab-gen {cmd}: error: {e}");
            ExitCode::from(2)
        }
    }
}

fn secs_ns(a: &Args, k: &str) -> Result<Option<u64>, String> {
    match a.f64(k)? {
        None => Ok(None),
        Some(s) if s > 0.0 && s < 1e7 => Ok(Some((s * 1e9) as u64)),
        Some(_) => Err(format!("--{k} must be a positive number of seconds")),
    }
}

const SEND_OPTS: &[&str] = &[
    "dst",
    "size",
    "rate",
    "bitrate",
    "duration",
    "count",
    "batch",
    "tos",
    "bind",
    "bitrate-counts",
    "fin",
    "wait",
    "pattern",
    "burst",
    "idle",
    "shape",
    "seed",
];

/// Build the send configuration and the connected socket shared by send/ping.
fn send_setup(a: &Args, allow_max: bool) -> Result<(std::net::UdpSocket, SendCfg), String> {
    let dst = net::parse_addr(a.require("dst")?, "--dst")?;
    let extra = net::extra_header(dst);
    let size = a.u64("size")?.ok_or("missing required option --size")? as usize;
    if !(packet::HEADER_LEN..=65507).contains(&size) {
        return Err(format!(
            "--size must be between {} and 65507 bytes",
            packet::HEADER_LEN
        ));
    }
    let modes = a.has("rate") as u8 + a.has("bitrate") as u8 + a.has("max") as u8;
    if modes != 1 {
        return Err(if allow_max {
            "give exactly one of --rate, --bitrate, --max"
        } else {
            "give exactly one of --rate, --bitrate"
        }
        .into());
    }
    let (num, den) = if let Some(r) = a.f64("rate")? {
        if !(r > 0.0 && r < 1e9) {
            return Err("--rate must be in (0, 1e9) packets/s".into());
        }
        ((r * 1000.0).round() as u128, 1000u128)
    } else if let Some(b) = a.f64("bitrate")? {
        if !(1.0..1e12).contains(&b) {
            return Err("--bitrate must be in [1, 1e12) bit/s".into());
        }
        let per = match a.str("bitrate-counts").unwrap_or("frame") {
            "frame" => size + packet::FRAME_OVERHEAD + extra,
            "ip" => size + packet::IP_OVERHEAD + extra,
            "payload" => size,
            o => {
                return Err(format!(
                    "--bitrate-counts: expected frame, ip or payload, got '{o}'"
                ))
            }
        };
        (b.round() as u128, (per * 8) as u128)
    } else {
        (0, 1)
    };
    let duration_ns = secs_ns(a, "duration")?;
    let count = a.u64("count")?;
    if duration_ns.is_none() && count.is_none() {
        return Err("give --duration SECS and/or --count N".into());
    }
    let batch = a.u64("batch")?.unwrap_or(64).clamp(1, 1024) as usize;
    let bind = a
        .str("bind")
        .map(|s| net::parse_addr(s, "--bind"))
        .transpose()?;
    let sock =
        net::sender_socket(dst, bind).map_err(|e| format!("cannot open socket to {dst}: {e}"))?;
    if let Some(t) = a.u64("tos")? {
        if t > 255 {
            return Err("--tos must be 0..255".into());
        }
        net::set_tos(&sock, t as u8).map_err(|e| format!("cannot set TOS: {e}"))?;
    }
    let fin_copies = a.u64("fin")?.unwrap_or(5).min(1000) as u32;
    let pattern = pattern(a, num)?;
    Ok((
        sock,
        SendCfg {
            size,
            extra,
            pps_num: num,
            pps_den: den,
            duration_ns,
            count,
            batch,
            fin_copies,
            pattern,
        },
    ))
}

/// `--pattern poisson|exponential|pareto` (with `--burst`, `--idle`, `--shape`, `--seed`):
/// random departures around the rate (ns-2's Poisson and on/off sources).
fn pattern(a: &Args, pps_num: u128) -> Result<Option<(Pattern, u64)>, String> {
    let name = a.str("pattern").unwrap_or("cbr");
    let seed = a.u64("seed")?.unwrap_or(1);
    let on_off = |dist| -> Result<Pattern, String> {
        let burst = a
            .f64("burst")?
            .ok_or("--pattern exponential|pareto needs --burst SECS")?;
        let idle = a
            .f64("idle")?
            .ok_or("--pattern exponential|pareto needs --idle SECS")?;
        let valid = burst > 0.0 && burst < 1e7 && (0.0..1e7).contains(&idle);
        if !valid {
            return Err("--burst must be > 0 and --idle >= 0 seconds".into());
        }
        Ok(Pattern::OnOff {
            burst_ns: burst * 1e9,
            idle_ns: idle * 1e9,
            dist,
        })
    };
    let p = match name {
        "cbr" => return Ok(None),
        "poisson" => Pattern::Poisson,
        "exponential" => on_off(Dist::Exponential)?,
        "pareto" => {
            let shape = a.f64("shape")?.unwrap_or(1.5);
            if !(shape > 1.0 && shape < 1e6) {
                return Err("--shape must be > 1".into());
            }
            on_off(Dist::Pareto { shape })?
        }
        o => {
            return Err(format!(
                "--pattern: expected cbr, poisson, exponential or pareto, got '{o}'"
            ))
        }
    };
    if pps_num == 0 {
        return Err("--pattern needs --rate or --bitrate (not --max)".into());
    }
    Ok(Some((p, seed)))
}

fn cmd_send(rest: &[String]) -> Result<(), String> {
    let a = Args::parse(rest, SEND_OPTS, &["max", "json", "wait-signal"])?;
    let (sock, cfg) = send_setup(&a, true)?;
    if a.has("wait-signal") && !wanlab_gen::stop::wait_go() {
        return Ok(()); // stopped before it was started: nothing sent, nothing to report
    }
    let rep = send::run(&sock, &cfg)?;
    if a.has("json") {
        println!("{}", rep.to_json());
    } else {
        println!(
            "sent {} pkts of {} B in {:.3} s: {:.0} pps, {:.3} Mbit/s frames (busy retries {})",
            rep.sent,
            rep.size,
            rep.elapsed_ns as f64 / 1e9,
            rep.pps(),
            rep.pps() * (rep.size + packet::FRAME_OVERHEAD) as f64 * 8.0 / 1e6,
            rep.busy
        );
    }
    Ok(())
}

fn stop_rule(a: &Args) -> Result<StopRule, String> {
    let rule = StopRule {
        duration_ns: secs_ns(a, "duration")?,
        idle_ns: secs_ns(a, "idle-exit")?,
        fin_grace_ns: secs_ns(a, "fin-exit")?,
    };
    if rule.duration_ns.is_none() && rule.idle_ns.is_none() {
        return Err("give --duration SECS and/or --idle-exit SECS".into());
    }
    Ok(rule)
}

fn cmd_sink(rest: &[String]) -> Result<(), String> {
    let a = Args::parse(
        rest,
        &[
            "bind",
            "duration",
            "idle-exit",
            "interval",
            "fin-exit",
            "batch",
        ],
        &["json"],
    )?;
    let bind = net::parse_addr(a.require("bind")?, "--bind")?;
    let rule = stop_rule(&a)?;
    let interval = secs_ns(&a, "interval")?.unwrap_or(0);
    let batch = a.u64("batch")?.unwrap_or(256).clamp(1, 1024) as usize;
    let sock = net::bound_socket(bind, Duration::from_millis(50))
        .map_err(|e| format!("cannot bind {bind}: {e}"))?;
    let mut r = sink::run(&sock, rule, batch, interval)?;
    r.extra = net::extra_header(bind);
    if a.has("json") {
        println!("{}", r.to_json("sink", "owd"));
    } else {
        println!("{}", r.human("one-way delay"));
    }
    Ok(())
}

fn cmd_echo(rest: &[String]) -> Result<(), String> {
    let a = Args::parse(rest, &["bind", "duration", "idle-exit", "batch"], &["json"])?;
    let bind = net::parse_addr(a.require("bind")?, "--bind")?;
    let rule = stop_rule(&a)?;
    let batch = a.u64("batch")?.unwrap_or(64).clamp(1, 1024) as usize;
    let sock = net::bound_socket(bind, Duration::from_millis(50))
        .map_err(|e| format!("cannot bind {bind}: {e}"))?;
    let rep = echo::run(&sock, rule, batch)?;
    if a.has("json") {
        println!("{rep}");
    }
    Ok(())
}

fn cmd_ping(rest: &[String]) -> Result<(), String> {
    let a = Args::parse(rest, SEND_OPTS, &["json"])?;
    let (sock, cfg) = send_setup(&a, false)?;
    let wait = secs_ns(&a, "wait")?.unwrap_or(1_000_000_000);
    let (srep, r) = ping::run(sock, &cfg, wait)?;
    if a.has("json") {
        let j = r.to_json("ping", "rtt");
        println!(
            "{},\"sent_pkts\":{},\"send_pps\":{}}}",
            &j[..j.len() - 1],
            srep.sent,
            json::fmt_f64(srep.pps())
        );
    } else {
        println!("sent {} pkts; {}", srep.sent, r.human("rtt"));
    }
    Ok(())
}
