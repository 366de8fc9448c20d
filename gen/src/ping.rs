//! Round-trip measurement (`wanlab-gen ping`): a paced sender thread plus a
//! receiver on the same socket that collects the echoes reflected by
//! `wanlab-gen echo` and computes RTT from the embedded send timestamp.

use crate::clock::now_ns;
use crate::net::Batch;
use crate::send::{self, SendCfg, SendReport};
use crate::sink::Receiver;
use std::net::UdpSocket;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Returns the sender report and the receiver (RTT statistics).
pub fn run(sock: UdpSocket, cfg: &SendCfg, wait_ns: u64) -> Result<(SendReport, Receiver), String> {
    let rx_sock = sock
        .try_clone()
        .map_err(|e| format!("cannot clone socket: {e}"))?;
    rx_sock
        .set_read_timeout(Some(std::time::Duration::from_millis(20)))
        .map_err(|e| format!("cannot set timeout: {e}"))?;
    let done_at = Arc::new(AtomicU64::new(0));
    let done2 = done_at.clone();
    let rx = std::thread::spawn(move || -> Result<Receiver, String> {
        let mut b = Batch::new(256, 65536);
        let mut r = Receiver::new(0);
        loop {
            let n = b
                .recv(&rx_sock)
                .map_err(|e| format!("receive failed: {e}"))?;
            let now = now_ns();
            if n > 0 {
                r.on_batch(&b, n, now);
            }
            let d = done2.load(Ordering::Acquire);
            if crate::stop::requested()
                || d != 0
                    && (now >= d + wait_ns || (r.seq.announced.is_some() && r.seq.lost() == 0))
            {
                return Ok(r);
            }
        }
    });
    let res = send::run(&sock, cfg);
    done_at.store(now_ns(), Ordering::Release);
    let r = rx
        .join()
        .map_err(|_| "receiver thread panicked".to_string())??;
    Ok((res?, r))
}
