//! Whether the io_uring backend can start on this machine: what CI asks
//! before it runs the tests with `--features io-uring`.
//!
//! ```sh
//! cargo run --features io-uring --example io_uring_probe
//! ```
//!
//! Exits 0 if it starts, 2 (printing the kernel's reason) if this machine
//! refuses it (no io_uring, `sysctl kernel.io_uring_disabled`, a seccomp
//! filter, a kernel before 5.11), 1 if the backend is not compiled in.

use evloop::{backends, Error};

fn main() {
    match backends::open("io_uring") {
        Ok(b) => println!("io_uring backend: starts ({:?})", b.capabilities()),
        Err(Error::Backend { source, .. }) => {
            eprintln!("{source}");
            std::process::exit(2);
        }
        Err(e) => {
            eprintln!("io_uring backend: {e} (built without --features io-uring, or not Linux)");
            std::process::exit(1);
        }
    }
}
