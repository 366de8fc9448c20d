//! The engine's integration tests in one binary (a binary per file cost a link of the whole
//! engine each): one module per concern. Those that make namespaces or files name them by
//! this process's id and a prefix of their own module, so they never meet.

mod control_protocol;
mod fuzz;
mod integration;
mod lan_pairs;
mod link_rules;
mod offload;
mod patches;
mod port_move;
mod realtime_behind;
mod sim_hosts;
mod sim_router;
mod sim_tcp;
mod simulate;
mod traffic_patterns;
mod tunnel_stamp;
mod virtual_time;
