//! Drivers: thin loops that own the clock and feed the core.
pub mod allocator;
pub mod defer;
pub mod fanout;
pub mod messages;
pub mod os;
pub mod parallel;
pub mod partition_loop;
pub mod partitioner;
pub mod port_move;
pub mod priority;
pub mod realtime;
pub mod remote;
pub mod replicas;
pub mod simulate;
pub mod spsc;
pub mod virtual_time;
pub mod wake;
