//! Request/response load: `rr_client ADDR CONNS REQUESTS`: CONNS
//! connections (one thread each), each sending REQUESTS `PING`s one at a
//! time and waiting for each `+PONG`. Prints the requests per second.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Instant;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let addr = args
        .get(1)
        .cloned()
        .unwrap_or_else(|| "127.0.0.1:6390".into());
    let conns: usize = args.get(2).map_or(50, |a| a.parse().unwrap());
    let requests: usize = args.get(3).map_or(1000, |a| a.parse().unwrap());
    let began = Instant::now();
    let threads: Vec<_> = (0..conns)
        .map(|_| {
            let addr = addr.clone();
            std::thread::spawn(move || {
                let mut s = TcpStream::connect(&addr).unwrap();
                s.set_nodelay(true).unwrap();
                let mut reply = [0u8; 7];
                for _ in 0..requests {
                    s.write_all(b"*1\r\n$4\r\nPING\r\n").unwrap();
                    s.read_exact(&mut reply).unwrap();
                    assert_eq!(&reply, b"+PONG\r\n");
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let total = conns * requests;
    let secs = began.elapsed().as_secs_f64();
    println!(
        "{total} requests on {conns} connections in {secs:.2} s ({:.0}/s)",
        total as f64 / secs
    );
}
