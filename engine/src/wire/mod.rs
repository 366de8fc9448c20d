//! Wire formats: views over frame bytes (Ethernet), the `virtio_net_hdr` of offloaded TAP
//! frames, and the software segmentation that turns offloaded frames into wire frames.
pub mod ethernet;
pub mod gso;
pub mod vnet;
