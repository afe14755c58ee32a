//! The protocol side of `resp_server` (PING, SET, GET, SHUTDOWN; anything
//! else `+OK`): parsing and answering, with no I/O. Shared by path with its
//! tokio twin (`benches/peers/rust/src/bin/resp_tokio.rs`), so that the
//! two servers do the same work per request and differ only in the I/O
//! under it (benches/completion.sh compares them).

use std::collections::HashMap;

/// The keys and values SET stores and GET reads.
pub type Db = HashMap<Vec<u8>, Vec<u8>>;

/// A line ending in CRLF at `at`: its text and where the next begins.
fn line(input: &[u8], at: usize) -> Option<(&[u8], usize)> {
    let rest = input.get(at..)?;
    let n = rest.windows(2).position(|w| w == b"\r\n")?;
    Some((&rest[..n], at + n + 2))
}

fn number(text: &[u8]) -> Option<usize> {
    std::str::from_utf8(text).ok()?.parse().ok()
}

/// A command's arguments, and its length in bytes.
type Command<'a> = (Vec<&'a [u8]>, usize);

/// One command (`*N` of `$len` bulk strings, or an inline line);
/// `Ok(None)` if incomplete.
fn parse(input: &[u8]) -> Result<Option<Command<'_>>, &'static str> {
    let Some((head, mut at)) = line(input, 0) else {
        return Ok(None);
    };
    if head.first() != Some(&b'*') {
        let args = head
            .split(|&b| b == b' ')
            .filter(|a| !a.is_empty())
            .collect();
        return Ok(Some((args, at)));
    }
    let count = number(&head[1..]).ok_or("bad array length")?;
    let mut args = Vec::with_capacity(count);
    for _ in 0..count {
        let Some((len, next)) = line(input, at) else {
            return Ok(None);
        };
        if len.first() != Some(&b'$') {
            return Err("expected a bulk string");
        }
        let len = number(&len[1..]).ok_or("bad bulk length")?;
        if input.len() < next + len + 2 {
            return Ok(None);
        }
        args.push(&input[next..next + len]);
        at = next + len + 2;
    }
    Ok(Some((args, at)))
}

/// What [`step`] found at the start of its input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// A command, answered (its reply appended); its length in bytes.
    Answered(usize),
    /// SHUTDOWN, not answered (as Redis, whose server exits without a
    /// reply); its length in bytes. The evloop server stops on it.
    Shutdown(usize),
    /// No complete command: the rest waits for the next read.
    Incomplete,
    /// A protocol error, whose `-ERR` reply was appended (the caller
    /// sends it and closes).
    Error,
}

/// Answers the one command at the start of `input`, if it is complete,
/// appending its reply to `out`.
pub fn step(db: &mut Db, input: &[u8], out: &mut Vec<u8>) -> Step {
    match parse(input) {
        Ok(Some((args, n))) => {
            let cmd = args.first().map(|a| a.to_ascii_uppercase());
            match (cmd.as_deref(), args.len()) {
                (Some(b"PING"), _) => out.extend_from_slice(b"+PONG\r\n"),
                (Some(b"SET"), 3..) => {
                    db.insert(args[1].to_vec(), args[2].to_vec());
                    out.extend_from_slice(b"+OK\r\n");
                }
                (Some(b"GET"), 2) => match db.get(args[1]) {
                    Some(v) => {
                        out.extend_from_slice(format!("${}\r\n", v.len()).as_bytes());
                        out.extend_from_slice(v);
                        out.extend_from_slice(b"\r\n");
                    }
                    None => out.extend_from_slice(b"$-1\r\n"),
                },
                (Some(b"SHUTDOWN"), _) => return Step::Shutdown(n),
                _ => out.extend_from_slice(b"+OK\r\n"),
            }
            Step::Answered(n)
        }
        Ok(None) => Step::Incomplete,
        Err(e) => {
            out.extend_from_slice(format!("-ERR {e}\r\n").as_bytes());
            Step::Error
        }
    }
}

/// Answers every complete command at the start of `input`, appending the
/// replies to `out`: `Ok` with the bytes used (an incomplete command
/// stays for the next read), or `Err` after a protocol error, whose
/// `-ERR` reply ends `out` (the caller sends `out` and closes). SHUTDOWN
/// is answered `+OK` here, as any other command (the tokio twin's way;
/// the evloop server steps itself and stops).
#[allow(dead_code)] // the tokio twin's: the evloop server calls `step`
pub fn answer(db: &mut Db, input: &[u8], out: &mut Vec<u8>) -> Result<usize, ()> {
    let mut used = 0;
    loop {
        match step(db, &input[used..], out) {
            Step::Answered(n) => used += n,
            Step::Shutdown(n) => {
                used += n;
                out.extend_from_slice(b"+OK\r\n");
            }
            Step::Incomplete => return Ok(used),
            Step::Error => return Err(()),
        }
    }
}
