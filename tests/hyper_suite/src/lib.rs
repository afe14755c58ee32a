//! evloop's hyper, futures-io and tokio integration tests (tests/) and
//! the hyper servers (examples/): this library is empty, the crate exists
//! for them (see Cargo.toml).
