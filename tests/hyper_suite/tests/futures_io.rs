//! Crates written against `futures-io` that nobody here wrote, over
//! `evloop::exec::AsyncFd<TcpStream>` (its `futures_io::AsyncRead` and
//! `AsyncWrite`, the `futures` feature), on every kernel backend of the
//! build: async-tungstenite's websocket handshake and messages (text,
//! binary of a megabyte, ping, close), and futures-util's io helpers
//! (`BufReader::lines`, `copy`, `split`, `read_exact`) on a line
//! protocol and a full-duplex echo of megabytes.
// What evloop's own integration tests share (tests/common/).
#[path = "../../common/mod.rs"]
mod common;

use std::net::TcpStream;

use async_tungstenite::tungstenite::Message;
use common::{kernel_loop, on_backends, serve_one};
use evloop::exec::{block_on, spawn_local, AsyncFd};
use evloop::Loop;
use futures_util::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use futures_util::StreamExt;

fn kernels() -> &'static [&'static str] {
    if let Ok(only) = std::env::var("ONLY") {
        return Box::leak(vec![&*Box::leak(only.into_boxed_str())].into_boxed_slice());
    }
    evloop::backends::AVAILABLE
}

fn pattern(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i * 31 % 251) as u8).collect()
}

#[test]
fn websocket_handshake_and_messages_with_async_tungstenite() {
    on_backends("async-tungstenite", kernels(), |backend| {
        let mut lp = kernel_loop(backend);
        let echoed = block_on(&mut lp, &mut (), async {
            // The server: echoes text and binary messages until the
            // client closes.
            let (addr, server) = serve_one(|stream| async move {
                let mut ws = async_tungstenite::accept_async(stream).await.unwrap();
                let mut echoed = 0;
                while let Some(msg) = ws.next().await {
                    let msg = msg.unwrap();
                    if msg.is_text() || msg.is_binary() {
                        ws.send(msg).await.unwrap();
                        echoed += 1;
                    }
                }
                echoed
            });
            let stream = AsyncFd::<TcpStream>::connect(addr).await.unwrap();
            let (mut ws, res) =
                async_tungstenite::client_async(format!("ws://{addr}/echo"), stream)
                    .await
                    .unwrap();
            assert_eq!(res.status(), 101);
            for i in 0..100 {
                let text = format!("message {i}");
                ws.send(Message::text(text.clone())).await.unwrap();
                assert_eq!(ws.next().await.unwrap().unwrap(), Message::text(text));
            }
            // A megabyte in one message, both ways.
            let big = pattern(1 << 20);
            ws.send(Message::binary(big.clone())).await.unwrap();
            match ws.next().await.unwrap().unwrap() {
                Message::Binary(b) => assert!(b[..] == big[..], "{backend}: binary differs"),
                other => panic!("{backend}: {other:?}"),
            }
            // A ping is answered by the server's library itself.
            ws.send(Message::Ping(b"p".to_vec().into())).await.unwrap();
            assert_eq!(
                ws.next().await.unwrap().unwrap(),
                Message::Pong(b"p".to_vec().into())
            );
            ws.close(None).await.unwrap();
            // The server's close answer, then the end.
            while let Some(msg) = ws.next().await {
                assert!(msg.unwrap().is_close());
            }
            server.await.unwrap()
        })
        .unwrap();
        assert_eq!(echoed, 101);
    });
}

#[test]
fn a_line_protocol_with_futures_util_io() {
    on_backends("futures-util lines", kernels(), |backend| {
        let mut lp = kernel_loop(backend);
        block_on(&mut lp, &mut (), async {
            // The server: one answer line per request line, upper-cased,
            // through `&AsyncFd` (AsyncRead and AsyncWrite both).
            let (addr, server) = serve_one(|stream| async move {
                let mut lines = BufReader::new(&stream).lines();
                let writer = &stream;
                let mut n = 0;
                while let Some(line) = lines.next().await {
                    let line = line.unwrap();
                    writer
                        .write_all(format!("{}\n", line.to_uppercase()).as_bytes())
                        .await
                        .unwrap();
                    n += 1;
                }
                n
            });
            let stream = AsyncFd::<TcpStream>::connect(addr).await.unwrap();
            let (reader, mut writer) = stream.split();
            let mut answers = BufReader::new(reader).lines();
            for i in 0..200 {
                writer
                    .write_all(format!("line {i}\n").as_bytes())
                    .await
                    .unwrap();
                let answer = answers.next().await.unwrap().unwrap();
                assert_eq!(answer, format!("LINE {i}"));
            }
            writer.close().await.unwrap();
            // Closing our writer does not end the socket (a drop does).
            drop(writer);
            drop(answers);
            assert_eq!(server.await.unwrap(), 200);
        })
        .unwrap();
    });
}

/// The full-duplex echo on `backend`: a writer task and the reader,
/// `size` bytes, and the end of the stream both ways (the server's
/// `copy` ends at the client's shutdown, and its close ends the
/// client's `read_to_end`).
fn full_duplex(mut lp: Loop<'static>, size: usize) {
    let backend = lp.backend_name();
    block_on(&mut lp, &mut (), async {
        // The server: `copy` from the socket to itself until the end.
        let (addr, server) = serve_one(|stream| async move {
            let (mut r, mut w) = (&stream, &stream);
            futures_util::io::copy(&mut r, &mut w).await.unwrap()
        });
        let stream = AsyncFd::<TcpStream>::connect(addr).await.unwrap();
        let stream = std::rc::Rc::new(stream);
        // Writer and reader in tasks of their own: neither may wait
        // for the other, or the socket buffers fill both ways.
        let out = stream.clone();
        let writer = spawn_local(async move {
            let data = pattern(size);
            for chunk in data.chunks(100_000) {
                out.write_all(chunk).await.unwrap();
            }
            out.get_ref().shutdown(std::net::Shutdown::Write).unwrap();
        })
        .unwrap();
        let mut back = vec![0u8; size];
        (&*stream).read_exact(&mut back).await.unwrap();
        let mut rest = Vec::new();
        (&*stream).read_to_end(&mut rest).await.unwrap();
        writer.await.unwrap();
        assert!(rest.is_empty());
        assert!(back == pattern(size), "{backend}: the echo differs");
        assert_eq!(server.await.unwrap(), size as u64);
    })
    .unwrap();
}

#[test]
fn full_duplex_echo_of_megabytes_with_copy_and_split() {
    on_backends("futures-util copy", kernels(), |backend| {
        full_duplex(kernel_loop(backend), 6 << 20);
    });
}
