//! Typed commands: a parsed [`Request`] after every check that needs no engine state.
//!
//! [`validate`] is pure (the control thread runs it while the real-time loop moves frames);
//! `exec.rs` applies a [`Command`] to the engine and is left only the checks that need the
//! network's current state (`check.rs`) and the system calls (TAPs, capture files).

use super::protocol::{AgentAction, CaptureSel, DirSpec, ParamsSpec, RemoveReq, Request};
use super::topology::{build_apply, ApplyCmd};
use crate::model::network::Dir;

/// Which LAN member or link a request addresses.
#[derive(Debug, Clone, PartialEq)]
pub struct Target {
    pub target: String,
    pub member: Option<String>,
}

#[derive(Debug, Clone)]
pub enum Command {
    Hello,
    Apply(Box<ApplyCmd>),
    Remove(RemoveReq),
    /// `params` is merged into each direction's current parameters (and the result checked)
    /// when it runs.
    Set {
        at: Target,
        dir: Dir,
        // boxed: the variant stays small (clippy::large_enum_variant)
        params: Box<ParamsSpec>,
        /// A LAN pair channel's receiving member (with `at.member` its sender).
        to: Option<String>,
    },
    SetUp {
        at: Target,
        up: bool,
    },
    Stats {
        target: Option<String>,
    },
    CaptureStart {
        at: Target,
        dir: Dir,
        path: String,
        snaplen: Option<u32>,
        nanos: bool,
    },
    CaptureStop(CaptureSel),
    CaptureSnapshot(CaptureSel),
    Subscribe {
        interval_ns: u64,
        target: Option<String>,
    },
    Agent {
        agent: String,
        start: bool,
    },
    Trace {
        agent: String,
        clear: bool,
    },
    /// Move a TAP port to another partition (run by the real-time engine's leader,
    /// `driver/port_move.rs`).
    MovePort {
        port: String,
        partition: u32,
    },
    /// The clock offset of the engine across a tunnel port (see `TunnelClockReq`).
    TunnelClock {
        port: String,
        offset_ns: i64,
    },
    Shutdown,
}

/// Largest clock offset a tunnel port takes: beyond it the machines' clocks need fixing,
/// not compensating.
pub const MAX_CLOCK_OFFSET_NS: u64 = 60_000_000_000;

fn selector_ok(sel: &CaptureSel) -> Result<(), String> {
    if sel.target.is_none() && (sel.member.is_some() || sel.dir.is_some()) {
        return Err("target: required when member or dir is given".into());
    }
    Ok(())
}

/// Check a request's values and turn it into a command (pure).
pub fn validate(req: Request) -> Result<Command, String> {
    Ok(match req {
        Request::Hello => Command::Hello,
        Request::Apply(a) => Command::Apply(Box::new(build_apply(a)?)),
        Request::Remove(r) => Command::Remove(r),
        Request::Set(s) => {
            let s = *s;
            Command::Set {
                at: Target {
                    target: s.target,
                    member: s.member,
                },
                dir: s.dir.unwrap_or(DirSpec::Both).into(),
                params: Box::new(s.params),
                to: s.to,
            }
        }
        Request::Down(d) => Command::SetUp {
            at: Target {
                target: d.target,
                member: d.member,
            },
            up: false,
        },
        Request::Up(d) => Command::SetUp {
            at: Target {
                target: d.target,
                member: d.member,
            },
            up: true,
        },
        Request::Stats(s) => Command::Stats { target: s.target },
        Request::CaptureStart(c) => {
            if c.path.is_empty() {
                return Err("path: must not be empty".into());
            }
            Command::CaptureStart {
                at: Target {
                    target: c.target,
                    member: c.member,
                },
                dir: c.dir.into(),
                path: c.path,
                snaplen: c.snaplen,
                nanos: c.nanos.unwrap_or(false),
            }
        }
        Request::CaptureStop(sel) => {
            selector_ok(&sel)?;
            Command::CaptureStop(sel)
        }
        Request::CaptureSnapshot(sel) => {
            selector_ok(&sel)?;
            Command::CaptureSnapshot(sel)
        }
        // `interval_ms` >= 10 was checked by the parser.
        Request::Subscribe(s) => Command::Subscribe {
            interval_ns: s.interval_ms.saturating_mul(1_000_000),
            target: s.target,
        },
        Request::Agent(a) => Command::Agent {
            agent: a.agent,
            start: a.action == AgentAction::Start,
        },
        Request::Trace(t) => Command::Trace {
            agent: t.agent,
            clear: t.clear,
        },
        Request::MovePort(m) => Command::MovePort {
            port: m.port,
            partition: m.partition,
        },
        Request::TunnelClock(t) => {
            if t.offset_ns.unsigned_abs() > MAX_CLOCK_OFFSET_NS {
                return Err(format!(
                    "offset_ns: {} is more than 60 s; synchronise the machines' clocks",
                    t.offset_ns
                ));
            }
            Command::TunnelClock {
                port: t.port,
                offset_ns: t.offset_ns,
            }
        }
        Request::Shutdown => Command::Shutdown,
    })
}
