//! I/O with the kernel that the control plane guards: TAP devices, capture files confined
//! to one directory, and the credentials of a control-socket peer.
pub mod capture_file;
pub mod peer;
pub mod tap;
