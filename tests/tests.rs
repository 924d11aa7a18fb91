//! End-to-end tests across crates, with real servers and clients.
