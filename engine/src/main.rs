//! `wanlab-engine --socket PATH [--seed N] [--log PATH] [--busy-poll] [--spin-us N] [--linger-us N] [--spin-budget PCT] [--anticipate-us N] [--coalesce-us N] [--rt-priority N] [--behind-us N] [--capture-dir DIR] [--threads N] [--cpus LIST] [--rps]`
//!
//! Starts the real-time driver with an empty network; the control plane then builds the
//! topology over the socket (see docs/engine-protocol.md). Captures are written only inside
//! `--capture-dir` (without it, `capture_start` is refused).
//!
//! `wanlab-engine simulate SCENARIO.json [--out RESULT.json] [--threads N]` runs a scenario in virtual time
//! instead (see `driver/simulate.rs`) and writes the result to RESULT.json (or stdout).
//! With `--rank R --ranks N (--listen ADDR | --connect ADDR)` it is one of N engine
//! processes running the scenario together (`driver/remote.rs`), each on the threads the
//! scenario's `rank_threads` gives it; rank 0 listens and writes the result.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use wanlab_engine::control::exec::engine_version;
use wanlab_engine::driver::realtime::{run, Options};
use wanlab_engine::driver::remote::Role;

const USAGE: &str = "usage: wanlab-engine --socket PATH [--seed N] [--log PATH] [--busy-poll] [--spin-us N] [--linger-us N] [--spin-budget PCT] [--anticipate-us N] [--coalesce-us N] [--rt-priority N] [--behind-us N] [--capture-dir DIR] [--threads N] [--cpus LIST] [--rps]
       wanlab-engine simulate SCENARIO.json [--out RESULT.json] [--threads N]
       wanlab-engine simulate SCENARIO.json [--out RESULT.json] --rank R --ranks N (--listen ADDR | --connect ADDR) [--connect-timeout S]";

/// Partitions of the real-time engine at most (one thread each).
const MAX_THREADS: u32 = 64;

/// `simulate SCENARIO [--out PATH]` (arguments after `simulate`).
fn simulate_main(args: &[String]) -> ExitCode {
    let mut scenario = None;
    let mut out = None;
    let mut threads = 1u32;
    let (mut rank, mut ranks, mut addr) = (None, None, None);
    let mut timeout = 120u64;
    let mut it = args.iter();
    let number = |v: Option<&String>, flag: &str, max: u64| -> Result<u64, ExitCode> {
        match v.and_then(|v| v.parse::<u64>().ok()) {
            Some(n) if n <= max => Ok(n),
            _ => {
                eprintln!("wanlab-engine: {flag} needs a number from 0 to {max}\n{USAGE}");
                Err(ExitCode::from(2))
            }
        }
    };
    while let Some(a) = it.next() {
        match a.as_str() {
            "--rank" => match number(it.next(), "--rank", 1023) {
                Ok(n) => rank = Some(n as u32),
                Err(c) => return c,
            },
            "--ranks" => match number(it.next(), "--ranks", 1024) {
                Ok(n) => ranks = Some(n as u32),
                Err(c) => return c,
            },
            "--connect-timeout" => match number(it.next(), "--connect-timeout", 86_400) {
                Ok(n) => timeout = n,
                Err(c) => return c,
            },
            "--listen" | "--connect" => match it.next() {
                Some(v) => addr = Some((a.clone(), v.clone())),
                None => {
                    eprintln!("wanlab-engine: {a} needs an address (HOST:PORT)\n{USAGE}");
                    return ExitCode::from(2);
                }
            },
            "--out" => match it.next() {
                Some(p) => out = Some(PathBuf::from(p)),
                None => {
                    eprintln!("wanlab-engine: --out needs a value\n{USAGE}");
                    return ExitCode::from(2);
                }
            },
            "--threads" => match it.next().and_then(|v| v.parse::<u32>().ok()) {
                Some(n) if (1..=1024).contains(&n) => threads = n,
                _ => {
                    eprintln!("wanlab-engine: --threads needs a number from 1 to 1024\n{USAGE}");
                    return ExitCode::from(2);
                }
            },
            s if !s.starts_with('-') && scenario.is_none() => scenario = Some(PathBuf::from(s)),
            other => {
                eprintln!("wanlab-engine: simulate: unexpected argument {other:?}\n{USAGE}");
                return ExitCode::from(2);
            }
        }
    }
    let Some(scenario) = scenario else {
        eprintln!("wanlab-engine: simulate needs a scenario file\n{USAGE}");
        return ExitCode::from(2);
    };
    let role = match (rank, ranks, addr) {
        (None, None, None) => None,
        (Some(rank), Some(ranks), Some((flag, addr))) => {
            if (rank == 0) != (flag == "--listen") {
                eprintln!(
                    "wanlab-engine: rank 0 takes --listen, the other ranks --connect\n{USAGE}"
                );
                return ExitCode::from(2);
            }
            Some(Role {
                rank,
                ranks,
                addr,
                connect_timeout: Duration::from_secs(timeout),
            })
        }
        _ => {
            eprintln!("wanlab-engine: --rank, --ranks and --listen/--connect go together\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    ExitCode::from(wanlab_engine::driver::simulate::main(
        &scenario,
        out.as_deref(),
        threads,
        role.as_ref(),
    ))
}

struct Args {
    socket: PathBuf,
    seed: u64,
    log: Option<PathBuf>,
    busy_poll: bool,
    spin_us: u64,
    linger_us: u64,
    spin_budget_pct: f64,
    anticipate_us: u64,
    coalesce_us: u64,
    rt_priority: i32,
    behind_us: u64,
    capture_dir: Option<PathBuf>,
    threads: u32,
    rps: bool,
    cpus: Option<Vec<usize>>,
}

fn parse_args() -> Result<Args, String> {
    let mut socket = None;
    let mut seed = 1u64;
    let mut log = None;
    let mut busy_poll = false;
    let mut spin_us = 10u64;
    let mut linger_us = 100u64;
    let mut spin_budget_pct = 10.0f64;
    let mut anticipate_us = 100u64;
    let mut coalesce_us = 20u64;
    let mut rt_priority = 0i32;
    let mut behind_us = 1000u64;
    let mut capture_dir = None;
    let mut threads = 1u32;
    let mut rps = false;
    let mut cpus = None;
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        let mut val = |name: &str| it.next().ok_or(format!("{name} needs a value"));
        match a.as_str() {
            "--socket" => socket = Some(PathBuf::from(val("--socket")?)),
            "--seed" => seed = val("--seed")?.parse().map_err(|e| format!("--seed: {e}"))?,
            "--log" => log = Some(PathBuf::from(val("--log")?)),
            "--busy-poll" => busy_poll = true,
            "--rps" => rps = true,
            "--cpus" => {
                cpus = Some(
                    wanlab_engine::driver::allocator::parse_cpulist(&val("--cpus")?)
                        .map_err(|e| format!("--cpus: {e}"))?,
                )
            }
            "--spin-us" => {
                spin_us = val("--spin-us")?
                    .parse()
                    .map_err(|e| format!("--spin-us: {e}"))?
            }
            "--linger-us" => {
                linger_us = val("--linger-us")?
                    .parse()
                    .map_err(|e| format!("--linger-us: {e}"))?
            }
            "--spin-budget" => {
                spin_budget_pct = val("--spin-budget")?
                    .parse()
                    .map_err(|e| format!("--spin-budget: {e}"))?;
                if !(0.0..=100.0).contains(&spin_budget_pct) {
                    return Err("--spin-budget: a percentage from 0 to 100".into());
                }
            }
            "--anticipate-us" => {
                anticipate_us = val("--anticipate-us")?
                    .parse()
                    .map_err(|e| format!("--anticipate-us: {e}"))?
            }
            "--coalesce-us" => {
                coalesce_us = val("--coalesce-us")?
                    .parse()
                    .map_err(|e| format!("--coalesce-us: {e}"))?
            }
            "--rt-priority" => {
                rt_priority = val("--rt-priority")?
                    .parse()
                    .map_err(|e| format!("--rt-priority: {e}"))?;
                wanlab_engine::driver::priority::check(rt_priority)?;
            }
            "--behind-us" => {
                behind_us = val("--behind-us")?
                    .parse()
                    .map_err(|e| format!("--behind-us: {e}"))?
            }
            "--capture-dir" => capture_dir = Some(PathBuf::from(val("--capture-dir")?)),
            "--threads" => {
                threads = match val("--threads")?.parse::<u32>() {
                    Ok(n) if (1..=MAX_THREADS).contains(&n) => n,
                    _ => return Err(format!("--threads: a number from 1 to {MAX_THREADS}")),
                }
            }
            "--version" => {
                println!("{}", engine_version());
                std::process::exit(0);
            }
            "-h" | "--help" => {
                println!("{USAGE}");
                std::process::exit(0);
            }
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    Ok(Args {
        socket: socket.ok_or("--socket is required")?,
        seed,
        log,
        busy_poll,
        spin_us,
        linger_us,
        spin_budget_pct,
        anticipate_us,
        coalesce_us,
        rt_priority,
        behind_us,
        capture_dir,
        threads,
        rps,
        cpus,
    })
}

/// Send stderr to the log file (appending), so diagnostics survive a detached engine.
fn redirect_stderr(path: &std::path::Path) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    let f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)?;
    // SAFETY: dup2 onto fd 2 with a valid fd.
    if unsafe { libc::dup2(f.as_raw_fd(), 2) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

fn main() -> ExitCode {
    let argv: Vec<String> = std::env::args().collect();
    if argv.get(1).map(String::as_str) == Some("simulate") {
        return simulate_main(&argv[2..]);
    }
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("wanlab-engine: {e}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    if let Some(l) = &args.log {
        if let Err(e) = redirect_stderr(l) {
            eprintln!("wanlab-engine: --log {}: {e}", l.display());
            return ExitCode::from(2);
        }
    }
    eprintln!(
        "{} starting: socket {} seed {} threads {}",
        engine_version(),
        args.socket.display(),
        args.seed,
        args.threads
    );
    match run(
        &args.socket,
        args.seed,
        Options {
            threads: args.threads,
            busy_poll: args.busy_poll,
            spin_ns: args.spin_us.saturating_mul(1000),
            linger_ns: args.linger_us.saturating_mul(1000),
            spin_budget_ppm: (args.spin_budget_pct * 10_000.0) as u64,
            anticipate_ns: args.anticipate_us.saturating_mul(1000),
            coalesce_ns: args.coalesce_us.saturating_mul(1000),
            rt_priority: args.rt_priority,
            behind_ns: args.behind_us.saturating_mul(1000),
            capture_dir: args.capture_dir,
            rps: args.rps,
            cpus: args.cpus,
        },
    ) {
        Ok(()) => {
            eprintln!("wanlab-engine: clean exit");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("wanlab-engine: {e}");
            ExitCode::FAILURE
        }
    }
}
