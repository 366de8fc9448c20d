//! Wire formats: views over frame bytes (Ethernet, ARP, IPv4, ICMP, IPv6, ICMPv6 with
//! neighbour discovery, UDP, TCP) and their one
//! Internet checksum, the `virtio_net_hdr` of
//! offloaded TAP frames, and the software segmentation that turns offloaded frames into wire
//! frames.
pub mod arp;
pub mod checksum;
pub mod ethernet;
pub mod gso;
pub mod icmp;
pub mod icmpv6;
pub mod ipv4;
pub mod ipv6;
pub mod stamp;
pub mod tcp;
pub mod udp;
pub mod vnet;
