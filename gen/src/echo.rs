//! Echo responder (`wanlab-gen echo`): reflects every datagram unchanged to
//! its sender, so `wanlab-gen ping` can measure round-trip time from the
//! timestamp it put into the datagram.

use crate::clock::now_ns;
use crate::json::Obj;
use crate::net::Batch;
use crate::sink::StopRule;
use std::net::UdpSocket;

pub fn run(sock: &UdpSocket, rule: StopRule, batch: usize) -> Result<String, String> {
    let mut b = Batch::new(batch, 65536);
    let start = now_ns();
    let mut last = start;
    let (mut rx, mut tx) = (0u64, 0u64);
    loop {
        let n = b.recv(sock).map_err(|e| format!("receive failed: {e}"))?;
        let now = now_ns();
        if n > 0 {
            rx += n as u64;
            tx += b
                .reflect(sock, n)
                .map_err(|e| format!("send failed: {e}"))? as u64;
            last = now;
        }
        if crate::stop::requested()
            || rule.duration_ns.is_some_and(|d| now >= start + d)
            || rule.idle_ns.is_some_and(|i| now >= last + i)
        {
            break;
        }
    }
    Ok(Obj::new()
        .str("mode", "echo")
        .int("rx_pkts", rx)
        .int("tx_pkts", tx)
        .finish())
}
