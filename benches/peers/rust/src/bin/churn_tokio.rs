//! Connection churn on tokio (`../../churn.sh`): a current-thread
//! runtime, an accept loop spawning one task per connection that reads
//! the request, writes the reply and drops the socket (closing it).
//!
//!     churn_tokio PORT WARMUP COUNT

#[path = "../churn.rs"]
mod churn;

use std::cell::RefCell;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

thread_local! {
    static METER: RefCell<Option<churn::Meter>> = const { RefCell::new(None) };
}

fn main() {
    let args = churn::ServerArgs::parse("tokio");
    METER.with(|m| *m.borrow_mut() = Some(churn::Meter::new("tokio", &args)));
    let std_listener = evloop::net::ListenOptions::new()
        .backlog(churn::BACKLOG)
        .bind(args.addr())
        .expect("bind");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build()
        .expect("runtime");
    rt.block_on(async move {
        let listener = TcpListener::from_std(std_listener).expect("listener");
        loop {
            let (mut s, _) = match listener.accept().await {
                Ok(a) => a,
                Err(e) => {
                    eprintln!("accept: {e}");
                    continue;
                }
            };
            tokio::spawn(async move {
                let mut buf = [0u8; churn::READ_BUF];
                if let Ok(n) = s.read(&mut buf).await {
                    if n > 0 {
                        let _ = s.write_all(churn::REPLY).await;
                    }
                }
                drop(s);
                METER.with(|m| m.borrow_mut().as_mut().expect("meter").closed());
            });
        }
    });
}
