//! The worker behind `rdctl worker run`.
//!
//! Its job: on a schedule, resolve each zone's image reference, pull and verify every blob digest
//! and every layer DiffID, unpack safely into a staging root, and only then hand the verified root
//! to a provisioner (`dir` for tests and Linux, `illumos` for zones). It will depend on
//! `validator` and `registry` (client only).
//!
//! Nothing is implemented yet: this crate holds no code until the worker issue lands.
