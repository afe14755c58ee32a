//! A small supervisor on one loop: a child process, a worker thread and a
//! clean shutdown on SIGINT or SIGTERM.
//!
//! It starts a child process (`sh`, which works for a second and exits
//! with code 3) with `Child::spawn`, which watches it from the start and
//! hands back no `std::process::Child` whose `wait` could take its status,
//! and a worker thread that reports its progress through an async sender,
//! and watches SIGINT and SIGTERM (`evloop::Signal`'s constants: no direct
//! dependency on `libc`). Once the child has exited
//! and the worker is done, it sends itself SIGTERM, as `kill -TERM <pid>`
//! from another terminal would, and shuts down on it: it ends by itself
//! in about a second. Press Ctrl-C to shut down earlier (the child is then
//! killed with `Child::kill`, which cannot hit another process that has
//! since been given its pid, and the worker told to stop).
//!
//! Run with: `cargo run --example signals_and_children`
//! (on another backend: `EVLOOP_BACKEND=poll cargo run --example signals_and_children`)

use std::process::Command;
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use evloop::{Async, Child, Error, Loop, RunMode, Signal};

/// The loop's state: what is still running, and how to reach it.
struct Supervisor {
    /// The child process's watcher, until it reports the exit.
    child: Option<Child>,
    /// The worker's progress reports.
    progress: mpsc::Receiver<u32>,
    /// The async watcher the worker wakes, while it works.
    worker: Option<Async>,
    /// The SIGINT and SIGTERM watchers.
    signals: Vec<Signal>,
    /// The shutdown has begun, or been asked for.
    stopping: bool,
}

const STEPS: u32 = 5;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut lp: Loop<Supervisor> = Loop::new()?;
    println!(
        "supervisor {} on the {} backend",
        std::process::id(),
        lp.backend_name()
    );

    let mut job = Command::new("sh");
    job.args(["-c", "echo '  child: working'; sleep 1; exit 3"]);
    let (child, _pipes) = Child::spawn(&mut lp, &mut job, |lp, sup, ev| {
        // The loop has reaped it: nothing left to kill. Its watcher is
        // stopped; removed, it frees its slot.
        sup.child = None;
        println!("child {} {}", ev.pid, ev.status.expect("an exit"));
        lp.remove(ev.watcher).unwrap();
        finish_if_done(lp, sup);
    })?;

    // The worker sends its progress over a channel and wakes the loop
    // with the async sender; once the loop stops listening (the watcher
    // removed), its sends fail and it stops.
    let (tx, progress) = mpsc::channel();
    let (worker, sender) = Async::new(&mut lp, |lp, sup, me| {
        for step in sup.progress.try_iter() {
            println!("worker: step {step} of {STEPS}");
            if step == STEPS {
                println!("worker: done");
                lp.remove(me).unwrap();
                sup.worker = None;
                finish_if_done(lp, sup);
                return;
            }
        }
    })?;
    let thread = thread::spawn(move || {
        for step in 1..=STEPS {
            thread::sleep(Duration::from_millis(100)); // the work
            if tx.send(step).is_err() || sender.send().is_err() {
                return; // the supervisor has stopped listening
            }
        }
    });

    let mut signals = Vec::new();
    for signal in [Signal::INT, Signal::TERM] {
        signals.push(Signal::new(&mut lp, signal, shut_down)?);
    }

    let mut sup = Supervisor {
        child: Some(child),
        progress,
        worker: Some(worker),
        signals,
        stopping: false,
    };
    // Returns once every watcher is gone: the signal watchers removed by
    // the shutdown, the worker's when it is done or told to stop, the
    // child's when the child has exited.
    let outcome = lp.run(RunMode::Default, &mut sup)?;
    thread.join().expect("the worker panicked");
    println!("supervisor: {outcome:?}, bye");
    Ok(())
}

/// Once the child and the worker are both done, asks for the shutdown the
/// way anyone else would: SIGTERM to this process.
fn finish_if_done(lp: &mut Loop<Supervisor>, sup: &mut Supervisor) {
    if sup.child.is_some() || sup.worker.is_some() || sup.stopping {
        return;
    }
    sup.stopping = true;
    let me = std::process::id();
    println!("supervisor: all done, sending SIGTERM to {me}");
    let sent = Command::new("sh")
        .args(["-c", &format!("kill -TERM {me}")])
        .status();
    if !matches!(&sent, Ok(status) if status.success()) {
        eprintln!("supervisor: could not send SIGTERM ({sent:?}): stopping anyway");
        for s in sup.signals.drain(..) {
            lp.remove(s).unwrap();
        }
    }
}

/// SIGINT or SIGTERM: stop what is still running, and stop watching the
/// signals (their default actions come back: a second Ctrl-C ends the
/// program at once).
fn shut_down(lp: &mut Loop<Supervisor>, sup: &mut Supervisor, me: Signal) {
    let name = Signal::name(me.number(lp).unwrap()).unwrap_or("a signal");
    println!("supervisor: {name}, shutting down");
    sup.stopping = true;
    for s in sup.signals.drain(..) {
        lp.remove(s).unwrap();
    }
    if let Some(worker) = sup.worker.take() {
        println!("supervisor: telling the worker to stop");
        lp.remove(worker).unwrap();
    }
    if let Some(child) = sup.child {
        // Its watcher reports how it ended. If it exited a moment ago and
        // the loop has reaped it, nothing is sent (its pid may be another
        // process's by now): the kill says so.
        println!("supervisor: killing the child");
        match child.kill(lp, Signal::KILL) {
            Ok(()) | Err(Error::ChildExited { .. }) => {}
            Err(err) => eprintln!("supervisor: {err}"),
        }
    }
}
