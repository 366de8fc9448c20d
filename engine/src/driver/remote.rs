//! Parallel virtual time across engine processes (one per machine of a cluster): the same
//! conservative windows as `driver/parallel`, with the barrier and the frames in flight on
//! cut links carried over TCP instead of shared memory.
//!
//! Every process runs the whole scenario loop on its own replica (the full network, told
//! which partition it runs), SPMD style: the loop is the same in every process, so each
//! collective step happens at the same point everywhere. Process 0 (the *coordinator*)
//! listens; the others connect to it, and it relays (a star): per window, each process
//! sends the earliest event of its replica and receives the global minimum (the window's
//! start), runs its window, sends the frames in flight on its cut links and receives the
//! ones addressed to it. Values the result needs from every replica (stats, replies,
//! traces) are gathered at the coordinator, which merges them exactly as the threads'
//! driver does (`driver/simulate`), so `result.json` is the same bytes.
//!
//! Messages are length-prefixed frames with no tag: both sides know what comes next from
//! where they are in the loop. A peer that goes away ends the run with an error everywhere
//! (its socket closes), never a hang on a half-closed barrier.
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant as WallInstant};

use serde::de::DeserializeOwned;
use serde::Serialize;

use super::parallel::Pool;
use super::replicas::Replicas;
use crate::control::exec::Engine;
use crate::model::network::partition::Flights;
use crate::model::network::PipeIdx;
use crate::model::packet::Packet;
use crate::time::Instant;
use crate::wire::vnet::{VnetHdr, LEN as VNET_LEN};

/// First bytes of a worker's hello (version 1 of this exchange).
const MAGIC: &[u8; 8] = b"WLSIMv1\0";
/// Largest frame accepted from a peer (a window's frames in flight, or a stats body).
const MAX_FRAME: usize = 1 << 30;

/// Which engine this process is and where the coordinator is.
#[derive(Debug, Clone)]
pub struct Role {
    /// 0: the coordinator, which listens on `addr`; others connect to `addr`.
    pub rank: u32,
    pub ranks: u32,
    pub addr: String,
    /// How long the coordinator waits for every worker and a worker for the coordinator.
    pub connect_timeout: Duration,
}

/// The connections of one process: the coordinator's to every worker (index rank − 1) or a
/// worker's to the coordinator.
pub enum Peers {
    Hub(Vec<TcpStream>),
    Worker(TcpStream),
}

/// A peer machine that vanishes without closing its connection (power, network) is found
/// by TCP keepalive within about 25 s of silence, instead of a read that never returns.
fn keepalive(s: &TcpStream) {
    use std::os::fd::AsRawFd;
    let fd = s.as_raw_fd();
    let set = |level: libc::c_int, name: libc::c_int, v: libc::c_int| {
        // SAFETY: fd is an open socket owned by `s`; the option value is a c_int.
        unsafe {
            libc::setsockopt(
                fd,
                level,
                name,
                (&v as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            );
        }
    };
    set(libc::SOL_SOCKET, libc::SO_KEEPALIVE, 1);
    set(libc::IPPROTO_TCP, libc::TCP_KEEPIDLE, 10);
    set(libc::IPPROTO_TCP, libc::TCP_KEEPINTVL, 5);
    set(libc::IPPROTO_TCP, libc::TCP_KEEPCNT, 3);
}

fn send(s: &mut TcpStream, b: &[u8]) -> Result<(), String> {
    let mut buf = Vec::with_capacity(4 + b.len());
    buf.extend_from_slice(&(b.len() as u32).to_le_bytes());
    buf.extend_from_slice(b);
    s.write_all(&buf)
        .map_err(|e| format!("sending to a peer engine: {e}"))
}

fn recv(s: &mut TcpStream) -> Result<Vec<u8>, String> {
    let mut n = [0u8; 4];
    s.read_exact(&mut n).map_err(|e| {
        format!("receiving from a peer engine: {e} (did it fail or exit? see its log)")
    })?;
    let n = u32::from_le_bytes(n) as usize;
    if n > MAX_FRAME {
        return Err(format!(
            "a peer engine sent a frame of {n} bytes (limit {MAX_FRAME})"
        ));
    }
    let mut b = vec![0u8; n];
    s.read_exact(&mut b)
        .map_err(|e| format!("receiving from a peer engine: {e}"))?;
    Ok(b)
}

/// A bounds-checked reader of a received frame.
struct Cursor<'a>(&'a [u8]);
impl Cursor<'_> {
    fn take(&mut self, n: usize) -> Result<&[u8], String> {
        if self.0.len() < n {
            return Err("a peer engine sent a truncated message".into());
        }
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        Ok(a)
    }
    fn u32(&mut self) -> Result<u32, String> {
        let b = self.take(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }
    fn u64(&mut self) -> Result<u64, String> {
        let mut a = [0u8; 8];
        a.copy_from_slice(self.take(8)?);
        Ok(u64::from_le_bytes(a))
    }
}

/// Frames in flight, each tagged with the partition that receives it:
/// count, then per pipeline `to, pipe, n` and n × `at_ns, vnet, len, data`.
pub fn encode_flights(out: &[(u32, PipeIdx, Flights)]) -> Vec<u8> {
    let mut b = Vec::new();
    b.extend_from_slice(&(out.len() as u32).to_le_bytes());
    for (to, pipe, f) in out {
        b.extend_from_slice(&to.to_le_bytes());
        b.extend_from_slice(&(*pipe as u64).to_le_bytes());
        b.extend_from_slice(&(f.len() as u32).to_le_bytes());
        for (at, p) in f {
            b.extend_from_slice(&at.nanos().to_le_bytes());
            b.extend_from_slice(&p.vnet.to_bytes());
            b.extend_from_slice(&(p.data.len() as u32).to_le_bytes());
            b.extend_from_slice(&p.data);
        }
    }
    b
}

pub fn decode_flights(b: &[u8]) -> Result<Vec<(u32, PipeIdx, Flights)>, String> {
    let mut c = Cursor(b);
    let n = c.u32()?;
    let mut out = Vec::new();
    for _ in 0..n {
        let to = c.u32()?;
        let pipe = usize::try_from(c.u64()?).map_err(|_| "pipeline index out of range")?;
        let k = c.u32()?;
        let mut f = Vec::new();
        for _ in 0..k {
            let at = Instant::from_nanos(c.u64()?);
            let vnet = VnetHdr::parse(c.take(VNET_LEN)?).unwrap_or_default();
            let len = c.u32()? as usize;
            let data = c.take(len)?.to_vec();
            f.push((at, Packet { data, vnet }));
        }
        out.push((to, pipe, f));
    }
    if !c.0.is_empty() {
        return Err("a peer engine sent trailing bytes".into());
    }
    Ok(out)
}

fn hello(role: &Role, digest: u64) -> Vec<u8> {
    let mut b = MAGIC.to_vec();
    b.extend_from_slice(&role.rank.to_le_bytes());
    b.extend_from_slice(&role.ranks.to_le_bytes());
    b.extend_from_slice(&digest.to_le_bytes());
    b
}

/// FNV-1a of the scenario's bytes: every engine of a run must run the same scenario.
pub fn digest(text: &[u8]) -> u64 {
    text.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// Set up the connections of `role` (the coordinator accepts every worker; a worker
/// connects, retrying until the coordinator listens). `digest` identifies the scenario.
pub fn connect(role: &Role, digest: u64) -> Result<Peers, String> {
    if role.ranks < 2 || role.rank >= role.ranks {
        return Err(format!(
            "--rank {} of --ranks {}: need 2 or more engines and a rank below their number",
            role.rank, role.ranks
        ));
    }
    let deadline = WallInstant::now() + role.connect_timeout;
    if role.rank == 0 {
        return accept_all(role, digest, deadline).map(Peers::Hub);
    }
    let addrs: Vec<_> = role
        .addr
        .to_socket_addrs()
        .map_err(|e| format!("--connect {}: {e}", role.addr))?
        .collect();
    let mut s = loop {
        let last = addrs
            .iter()
            .map(|a| TcpStream::connect_timeout(a, Duration::from_secs(2)))
            .find_map(Result::ok);
        if let Some(s) = last {
            break s;
        }
        if WallInstant::now() >= deadline {
            return Err(format!(
                "the coordinating engine at {} did not answer within {} s",
                role.addr,
                role.connect_timeout.as_secs()
            ));
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let _ = s.set_nodelay(true);
    keepalive(&s);
    send(&mut s, &hello(role, digest))?;
    let reply = recv(&mut s)?;
    if reply != b"OK" {
        return Err(String::from_utf8_lossy(&reply).into_owned());
    }
    Ok(Peers::Worker(s))
}

fn accept_all(role: &Role, digest: u64, deadline: WallInstant) -> Result<Vec<TcpStream>, String> {
    let l = TcpListener::bind(&role.addr).map_err(|e| format!("--listen {}: {e}", role.addr))?;
    l.set_nonblocking(true)
        .map_err(|e| format!("--listen {}: {e}", role.addr))?;
    let mut slots: Vec<Option<TcpStream>> = (1..role.ranks).map(|_| None).collect();
    while slots.iter().any(Option::is_none) {
        let mut s = match l.accept() {
            Ok((s, _)) => s,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                if WallInstant::now() >= deadline {
                    let missing: Vec<String> = (1..role.ranks)
                        .filter(|r| slots[*r as usize - 1].is_none())
                        .map(|r| r.to_string())
                        .collect();
                    return Err(format!(
                        "engines of rank {} did not connect to {} within {} s",
                        missing.join(", "),
                        role.addr,
                        role.connect_timeout.as_secs()
                    ));
                }
                std::thread::sleep(Duration::from_millis(20));
                continue;
            }
            Err(e) => return Err(format!("--listen {}: accept: {e}", role.addr)),
        };
        let _ = s.set_nonblocking(false);
        let _ = s.set_nodelay(true);
        // A stranger that never says hello must not stall the run forever.
        let _ = s.set_read_timeout(Some(Duration::from_secs(10)));
        let Ok(h) = recv(&mut s) else { continue };
        let mut c = Cursor(&h);
        let ok_magic = c.take(MAGIC.len()).is_ok_and(|m| m == MAGIC);
        let (Ok(rank), Ok(ranks), Ok(d)) = (c.u32(), c.u32(), c.u64()) else {
            continue;
        };
        if !ok_magic {
            continue;
        }
        let refuse = if ranks != role.ranks {
            Some(format!(
                "engine of rank {rank} runs with {ranks} engines, the coordinator with {}",
                role.ranks
            ))
        } else if d != digest {
            Some(format!(
                "engine of rank {rank} runs a different scenario than the coordinator"
            ))
        } else if rank == 0 || rank >= ranks || slots[rank as usize - 1].is_some() {
            Some(format!(
                "rank {rank} is not expected (or already connected)"
            ))
        } else {
            None
        };
        if let Some(msg) = refuse {
            let _ = send(&mut s, msg.as_bytes());
            return Err(msg);
        }
        let _ = s.set_read_timeout(None);
        keepalive(&s);
        send(&mut s, b"OK")?;
        slots[rank as usize - 1] = Some(s);
    }
    Ok(slots.into_iter().flatten().collect())
}

impl Peers {
    fn is_hub(&self) -> bool {
        matches!(self, Peers::Hub(_))
    }

    /// The smallest `local` over every process (u64::MAX: nothing).
    fn min(&mut self, local: u64) -> Result<u64, String> {
        match self {
            Peers::Hub(ws) => {
                let mut m = local;
                for w in ws.iter_mut() {
                    let b = recv(w)?;
                    m = m.min(Cursor(&b).u64()?);
                }
                for w in ws.iter_mut() {
                    send(w, &m.to_le_bytes())?;
                }
                Ok(m)
            }
            Peers::Worker(s) => {
                send(s, &local.to_le_bytes())?;
                let b = recv(s)?;
                Cursor(&b).u64()
            }
        }
    }

    /// Hand every process the frames in flight addressed to its partitions (`rank_of`:
    /// partition → process); returns this process's, tagged with their partition.
    fn exchange(
        &mut self,
        out: Vec<(u32, PipeIdx, Flights)>,
        rank_of: &[u32],
    ) -> Result<Vec<(u32, PipeIdx, Flights)>, String> {
        match self {
            Peers::Hub(ws) => {
                let mut boxes: Vec<Vec<(u32, PipeIdx, Flights)>> =
                    (0..=ws.len()).map(|_| Vec::new()).collect();
                let mut route = |items: Vec<(u32, PipeIdx, Flights)>| -> Result<(), String> {
                    for (to, pipe, f) in items {
                        let b = rank_of
                            .get(to as usize)
                            .and_then(|&r| boxes.get_mut(r as usize))
                            .ok_or(format!(
                                "frames addressed to partition {to}, which no engine runs"
                            ))?;
                        b.push((to, pipe, f));
                    }
                    Ok(())
                };
                route(out)?;
                for w in ws.iter_mut() {
                    route(decode_flights(&recv(w)?)?)?;
                }
                for (w, b) in ws.iter_mut().zip(boxes.iter().skip(1)) {
                    send(w, &encode_flights(b))?;
                }
                Ok(boxes.swap_remove(0))
            }
            Peers::Worker(s) => {
                send(s, &encode_flights(&out))?;
                decode_flights(&recv(s)?)
            }
        }
    }
}

/// This process's replicas (its partitions, on its threads) and its connections to the
/// other processes.
///
/// Two levels of windows: across processes, windows over TCP with the lookahead of the
/// links cut *between* machines; inside one, the pool's windows between its threads with
/// the lookahead of the links cut between its own partitions (often much shorter, and a
/// barrier in memory costs microseconds where a round trip over TCP costs far more). A
/// window across processes starts at the earliest event m of any replica and ends before
/// m + lookahead, so nothing sent from another machine in it arrives within it: each
/// machine runs it alone, in as many windows of its own as its threads need.
pub struct Remote<'p, 'a> {
    pool: &'p mut Pool<'a>,
    peers: Peers,
    /// Partition → process (rank); this process runs `first..first + pool.len()`.
    rank_of: Vec<u32>,
    rank: u32,
    first: u32,
    /// Smallest delay of a link cut between machines (u64::MAX: none).
    lookahead_ns: u64,
    windows: u64,
}

impl<'p, 'a> Remote<'p, 'a> {
    /// `rank_of` maps every partition of the run to its process; `pool` holds this
    /// process's partitions, the first one being `first`.
    pub fn new(
        pool: &'p mut Pool<'a>,
        peers: Peers,
        rank_of: Vec<u32>,
        rank: u32,
        lookahead_ns: u64,
    ) -> Self {
        let first = rank_of.iter().position(|&r| r == rank).unwrap_or(0) as u32;
        Remote {
            pool,
            peers,
            rank_of,
            rank,
            first,
            lookahead_ns,
            windows: 0,
        }
    }

    /// Whether this process writes the result (the coordinator).
    pub fn is_coordinator(&self) -> bool {
        self.peers.is_hub()
    }

    /// Windows between this process's threads so far.
    pub fn local_windows(&self) -> u64 {
        self.pool.windows
    }
}

impl Replicas for Remote<'_, '_> {
    fn count(&self) -> usize {
        self.rank_of.len()
    }

    fn each<R, F>(&mut self, f: F) -> Result<Vec<R>, String>
    where
        R: Serialize + DeserializeOwned,
        F: FnMut(&mut Engine) -> R,
    {
        // Partitions are numbered process by process: rank order is partition order.
        let mut all = self.pool.each(f)?;
        match &mut self.peers {
            Peers::Hub(ws) => {
                for w in ws.iter_mut() {
                    let b = recv(w)?;
                    let theirs: Vec<R> = serde_json::from_slice(&b)
                        .map_err(|e| format!("a peer engine sent a bad value: {e}"))?;
                    all.extend(theirs);
                }
                Ok(all)
            }
            Peers::Worker(s) => {
                let b = serde_json::to_vec(&all).map_err(|e| e.to_string())?;
                send(s, &b)?;
                Ok(all)
            }
        }
    }

    fn local<R>(&mut self, f: impl FnOnce(&mut Engine) -> R) -> R {
        self.pool.with_engine(0, f)
    }

    fn advance_to(&mut self, t: Instant) -> Result<(), String> {
        loop {
            let local = self.pool.next_event().map_or(u64::MAX, |i| i.nanos());
            let m = self.peers.min(local)?;
            if m == u64::MAX || m > t.nanos() {
                return Ok(());
            }
            let end = t
                .nanos()
                .min(m.saturating_add(self.lookahead_ns.max(1) - 1));
            self.pool.advance_to(Instant::from_nanos(end));
            let out = self.pool.take_outbox();
            let mut mail = self.peers.exchange(out, &self.rank_of)?;
            // One sender per pipeline: ordering by pipeline fixes the arrival order, as
            // between threads.
            mail.sort_by_key(|m| (m.0, m.1));
            for (to, pipe, f) in mail {
                let i = to
                    .checked_sub(self.first)
                    .map_or(usize::MAX, |i| i as usize);
                if i >= self.pool.len() {
                    return Err(format!(
                        "frames for partition {to} reached the engine of rank {}, which does not run it",
                        self.rank
                    ));
                }
                self.pool.with_engine(i, |e| e.net.put_flights(pipe, f));
            }
            self.windows += 1;
        }
    }

    fn topology_changed(&mut self) -> Result<(), String> {
        let (me, rank_of) = (self.rank, &self.rank_of);
        let rank = |p: u32| rank_of.get(p as usize).copied().unwrap_or(u32::MAX);
        let (between, within) = self.pool.with_engine(0, |e| {
            (
                e.net.lookahead_where(|a, b| rank(a) != rank(b)),
                e.net.lookahead_where(|a, b| rank(a) == me && rank(b) == me),
            )
        });
        if between == Some(0) || within == Some(0) {
            return Err("a link between partitions now has no minimum delay (no lookahead); run on one machine with --threads 1".into());
        }
        self.lookahead_ns = between.unwrap_or(u64::MAX);
        self.pool.lookahead_ns = within.unwrap_or(u64::MAX);
        Ok(())
    }

    fn windows(&self) -> u64 {
        self.windows
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flights_survive_the_wire() {
        let vnet = VnetHdr {
            flags: 1,
            gso_type: 3,
            hdr_len: 54,
            gso_size: 1448,
            csum_start: 34,
            csum_offset: 16,
        };
        let out = vec![
            (
                1,
                7,
                vec![
                    (Instant::from_nanos(5), Packet::plain(vec![1, 2, 3])),
                    (
                        Instant::from_nanos(9),
                        Packet {
                            data: vec![4; 100],
                            vnet,
                        },
                    ),
                ],
            ),
            (2, 3, vec![]),
        ];
        let b = encode_flights(&out);
        assert_eq!(decode_flights(&b).unwrap(), out);
        assert!(decode_flights(&b[..b.len() - 1]).is_err());
        let mut long = b.clone();
        long.push(0);
        assert!(decode_flights(&long).is_err());
    }
}
