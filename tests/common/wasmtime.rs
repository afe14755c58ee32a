//! Running `wasm32-wasip1` guests under wasmtime from a Linux test: where
//! wasmtime and the built guests are, and a guest started with a TCP
//! listener preopened by the runtime (its fd 3).
//!
//! Environment (`tests/wasi/run.sh` sets the first two):
//! - `EVLOOP_WASMTIME`: the wasmtime binary (default: `wasmtime` on PATH).
//!   It must have the legacy WASIp1 implementation, the one with
//!   preopened sockets (`-S preview2=n -S tcplisten=ADDR`): wasmtime 36
//!   has it, 49 refuses `tcplisten`.
//! - `EVLOOP_WASI_DIR`: the directory holding the guests, `NAME.wasm`.
//! - `EVLOOP_REQUIRE_WASMTIME=1`: a missing wasmtime or guest fails the
//!   test instead of skipping it loudly (CI sets it).

use std::io::Read;
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// wasmtime and the guest `name`, or `None` after a loud skip (a panic
/// under `EVLOOP_REQUIRE_WASMTIME=1`).
pub fn wasmtime_and_guest(name: &str) -> Option<(PathBuf, PathBuf)> {
    let required = std::env::var_os("EVLOOP_REQUIRE_WASMTIME").is_some_and(|v| v == "1");
    let skip = |why: String| {
        assert!(!required, "EVLOOP_REQUIRE_WASMTIME=1, but {why}");
        eprintln!("SKIPPED: {why} (tests/wasi/run.sh installs wasmtime and builds the guests)");
        None
    };
    let wasmtime = match std::env::var_os("EVLOOP_WASMTIME") {
        Some(path) => PathBuf::from(path),
        None => PathBuf::from("wasmtime"),
    };
    match Command::new(&wasmtime).arg("--version").output() {
        Ok(out) if out.status.success() => {}
        _ => return skip(format!("no wasmtime to run ({})", wasmtime.display())),
    }
    let Some(dir) = std::env::var_os("EVLOOP_WASI_DIR") else {
        return skip("EVLOOP_WASI_DIR (where the built guests are) is not set".into());
    };
    let guest = Path::new(&dir).join(format!("{name}.wasm"));
    if !guest.is_file() {
        return skip(format!("the guest {} was not built", guest.display()));
    }
    Some((wasmtime, guest))
}

/// A guest running under wasmtime, with a listener on `addr` preopened
/// as its fd 3; its output is collected as it runs.
pub struct Guest {
    child: Child,
    /// Where the guest's preopened listener listens.
    pub addr: SocketAddr,
    output: Option<JoinHandle<(String, String)>>,
}

/// A loopback port free now (the runtime binds it a moment later).
fn free_port() -> u16 {
    let l = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("bind a loopback port");
    l.local_addr().expect("its address").port()
}

impl Guest {
    /// Starts `wasm` under `wasmtime` with `args`.
    pub fn start(wasmtime: &Path, wasm: &Path, args: &[&str]) -> Guest {
        Guest::start_with(wasmtime, wasm, &[], args)
    }

    /// [`Guest::start`], with `runtime` options for wasmtime's `run`
    /// (`--dir HOST::GUEST`, `--env NAME=VALUE`). wasmtime 36 gives a
    /// preopened directory the fd after the listener's (3, then 4), where
    /// wasi-libc no longer looks for preopened directories: a guest
    /// reaches it with `openat` on its fd, not by path.
    pub fn start_with(wasmtime: &Path, wasm: &Path, runtime: &[&str], args: &[&str]) -> Guest {
        // One start at a time in this process: a guest forked while
        // another test's `free_port` listener is open holds a copy of it
        // until its exec, and that test's first connect then lands in it
        // and is reset when the exec closes it (seen 1 run in 60 with two
        // tests at once).
        static STARTING: std::sync::Mutex<()> = std::sync::Mutex::new(());
        let _one = STARTING.lock().unwrap_or_else(|e| e.into_inner());
        let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, free_port()));
        let mut child = Command::new(wasmtime)
            .args(["run", "-S", "preview2=n", "-S"])
            .arg(format!("tcplisten={addr}"))
            .args(runtime)
            .arg(wasm)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("start {}: {e}", wasmtime.display()));
        let (mut out, mut err) = (child.stdout.take().unwrap(), child.stderr.take().unwrap());
        // Read both to the end as the guest writes, so that it never
        // blocks on a full pipe.
        let output = std::thread::spawn(move || {
            let errors = std::thread::spawn(move || {
                let mut s = String::new();
                let _ = err.read_to_string(&mut s);
                s
            });
            let mut s = String::new();
            let _ = out.read_to_string(&mut s);
            (s, errors.join().unwrap_or_default())
        });
        Guest {
            child,
            addr,
            output: Some(output),
        }
    }

    /// A connection to the guest's listener; retried while the runtime
    /// is still starting (refused), for up to `limit`.
    pub fn connect(&mut self, limit: Duration) -> TcpStream {
        let start = Instant::now();
        loop {
            match TcpStream::connect(self.addr) {
                Ok(s) => return s,
                Err(e) if start.elapsed() < limit => {
                    if let Ok(Some(status)) = self.child.try_wait() {
                        panic!("the guest exited ({status}) before listening: {e}");
                    }
                    // The runtime binds the port when it starts: nothing
                    // to wait on but time.
                    std::thread::sleep(Duration::from_millis(20));
                }
                Err(e) => panic!("the guest never listened on {}: {e}", self.addr),
            }
        }
    }

    /// Waits for the guest to exit, for up to `limit` (then kills it and
    /// panics with its output): its status, stdout and stderr.
    pub fn wait(mut self, limit: Duration) -> (ExitStatus, String, String) {
        let (tx, rx) = mpsc::channel();
        let output = self.output.take().unwrap();
        std::thread::spawn(move || {
            let _ = tx.send(output.join().unwrap_or_default());
        });
        // The pipes close when the guest exits: then its status is there.
        match rx.recv_timeout(limit) {
            Ok((out, err)) => {
                let status = self.child.wait().expect("wait for the guest");
                (status, out, err)
            }
            Err(_) => {
                let _ = self.child.kill();
                let _ = self.child.wait();
                let (out, err) = rx.recv().unwrap_or_default();
                panic!("the guest did not exit within {limit:?}\nstdout:\n{out}\nstderr:\n{err}");
            }
        }
    }
}

impl Drop for Guest {
    fn drop(&mut self) {
        // A test that failed half-way leaves no runtime behind.
        if self.output.is_some() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}
