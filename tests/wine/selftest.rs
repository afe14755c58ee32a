// Test environment only (tests/wine/selftest.sh builds it with rustc for
// x86_64-pc-windows-gnu and runs it under Wine): checks that the Wine setup
// runs Rust programs. Modes:
//   selftest exit N   HashMap (std's ProcessPrng: the shim), then exit N
//   selftest ctrlc    GenerateConsoleCtrlEvent(CTRL_C_EVENT, 0) to itself:
//                     exit 0 if the handler saw it, 2 with the error if the
//                     call failed, 1 if nothing came
//   selftest wait     as ctrlc, but waits (10 s at most) for a console event
//                     from outside (a SIGINT to run.sh)
//   selftest echo     a TCP echo server on 127.0.0.1: prints its address,
//                     serves one client to its end, exits 0
use std::collections::HashMap;
use std::io::{Read, Write};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

#[link(name = "kernel32")]
unsafe extern "system" {
    fn SetConsoleCtrlHandler(
        handler: Option<unsafe extern "system" fn(u32) -> i32>,
        add: i32,
    ) -> i32;
    fn GenerateConsoleCtrlEvent(event: u32, group: u32) -> i32;
    fn GetLastError() -> u32;
}

static GOT: AtomicU32 = AtomicU32::new(u32::MAX);

unsafe extern "system" fn handler(event: u32) -> i32 {
    GOT.store(event, Ordering::SeqCst);
    1
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    match args.get(1).map(String::as_str) {
        Some("exit") => {
            let mut m = HashMap::new();
            m.insert("key", 1);
            println!("selftest: args {:?}, a HashMap {:?}", &args[2..], m);
            std::process::exit(args[2].parse().unwrap());
        }
        Some(mode @ ("ctrlc" | "wait")) => {
            // SAFETY: plain Win32 calls; the handler only stores an atomic.
            unsafe {
                SetConsoleCtrlHandler(None, 0);
                SetConsoleCtrlHandler(Some(handler), 1);
                if mode == "wait" {
                    println!("selftest: waiting for a console event");
                } else if GenerateConsoleCtrlEvent(0, 0) == 0 {
                    println!(
                        "selftest: GenerateConsoleCtrlEvent failed: error {}",
                        GetLastError()
                    );
                    std::process::exit(2);
                }
            }
            let start = Instant::now();
            while GOT.load(Ordering::SeqCst) == u32::MAX
                && start.elapsed() < Duration::from_secs(10)
            {
                std::thread::sleep(Duration::from_millis(10));
            }
            match GOT.load(Ordering::SeqCst) {
                u32::MAX => {
                    println!("selftest: no console event came");
                    std::process::exit(1);
                }
                e => println!("selftest: the handler got console event {e}"),
            }
        }
        Some("echo") => {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            println!("selftest: listening on {}", l.local_addr().unwrap());
            let (mut s, _) = l.accept().unwrap();
            let mut buf = [0u8; 16384];
            loop {
                let n = s.read(&mut buf).unwrap();
                if n == 0 {
                    break;
                }
                s.write_all(&buf[..n]).unwrap();
            }
        }
        _ => {
            eprintln!("usage: selftest exit N | ctrlc | wait | echo");
            std::process::exit(64);
        }
    }
}
