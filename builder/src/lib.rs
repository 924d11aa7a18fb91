//! The image builder behind `rdctl build` and `rdctl lock`.
//!
//! Its job: turn an image file (pinned IPS packages plus image config) and its lockfile into a
//! reproducible OCI image (sorted tar entries, fixed mtimes, fixed compression headers), written
//! as an OCI layout or pushed to a registry. It will depend on `ips-bridge`, `validator` and
//! `registry` (client only).
//!
//! Nothing is implemented yet: this crate holds no code until the builder issue lands.
