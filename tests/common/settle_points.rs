//! The hand-built programs of the direct-dispatch check, written once: one
//! per operation that must settle a direct batch before acting, each
//! arranged so that skipping the settle changes what is observed (random
//! programs hit these orderings only sometimes). Poll results come in
//! registration order, so watcher 0's callback runs before watcher 1's
//! event in the same batch.
//!
//! tests/direct_dispatch.rs runs them on the simulator (the events at
//! their virtual time, the backend traces compared too);
//! tests/scenarios/io_and_models.rs on every backend (the bytes and closes
//! there before the run; the invalid fd is the simulator's only).

/// What a callback of a program does, to a watcher of the program (by its
/// index) or, for `CreateIo`, to a socket.
#[derive(Debug, Clone, Copy)]
pub enum Act {
    Stop(usize),
    Start(usize),
    SetPriority(usize, i32),
    /// Both directions (`true`) or reading only.
    SetInterest(usize, bool),
    /// A new io watcher on this socket, from inside a callback.
    CreateIo(usize),
    Feed(usize),
    Clear(usize),
    IsActive(usize),
    BackendTimeout,
}

/// One io watcher of a program, at the default priority.
pub struct Watcher {
    pub socket: usize,
    pub oneshot: bool,
    /// What its n-th invocation does: `script[n % len]`.
    pub script: Vec<Vec<Act>>,
}

/// A program: its watchers, and what happens to its sockets (in this
/// order: closes, arrivals, invalidations).
pub struct Case {
    pub name: &'static str,
    pub watchers: Vec<Watcher>,
    /// Sockets whose peer closes.
    pub closes: &'static [usize],
    /// Sockets a byte arrives on.
    pub sends: &'static [usize],
    /// Sockets made invalid under their watchers (the simulator only).
    pub invalid: &'static [usize],
    /// When it all happens on the simulator, in virtual milliseconds.
    pub at_ms: u64,
}

fn watcher(socket: usize, script: Vec<Vec<Act>>) -> Watcher {
    Watcher {
        socket,
        oneshot: false,
        script,
    }
}

/// A one-shot watcher 0 on a socket whose peer closed (ready at every
/// poll) doing `script` in its own callback, whose disarm the direct
/// path defers; watcher 1 on another socket, for company.
fn oneshot_self(name: &'static str, script: Vec<Act>) -> Case {
    Case {
        name,
        watchers: vec![
            Watcher {
                oneshot: true,
                ..watcher(0, vec![script])
            },
            watcher(1, vec![vec![]]),
        ],
        closes: &[0],
        sends: &[1],
        invalid: &[],
        at_ms: 1,
    }
}

/// Watcher 0 does `act` to watcher 1 before watcher 1's event, both
/// sockets readable at once.
fn before_the_next(name: &'static str, act: Act) -> Case {
    Case {
        name,
        watchers: vec![watcher(0, vec![vec![act]]), watcher(1, vec![vec![]])],
        closes: &[],
        sends: &[0, 1],
        invalid: &[],
        at_ms: 1,
    }
}

/// Every program, named after the settle point it needs.
pub fn cases() -> Vec<Case> {
    vec![
        // Stopped and started again before its event: not pending any more
        // (the eager path cancelled its entry), so not invoked in this
        // iteration.
        Case {
            watchers: vec![
                watcher(0, vec![vec![Act::Stop(1), Act::Start(1)]]),
                watcher(1, vec![vec![]]),
            ],
            ..before_the_next("start", Act::Stop(1))
        },
        // Moved to a higher priority before its event: runs before the rest
        // of the batch.
        Case {
            watchers: vec![
                watcher(0, vec![vec![Act::SetPriority(2, 1)]]),
                watcher(1, vec![vec![]]),
                watcher(2, vec![vec![]]),
            ],
            sends: &[0, 1, 2],
            ..before_the_next("set_priority", Act::SetPriority(2, 1))
        },
        // Watcher 1 asks for both directions; in the next iteration its
        // socket is writable and watcher 0 narrows it to reading before its
        // event: the event was queued with the old interest.
        Case {
            name: "set_interest",
            watchers: vec![
                watcher(0, vec![vec![], vec![Act::SetInterest(1, false)]]),
                watcher(1, vec![vec![Act::SetInterest(1, true)], vec![]]),
            ],
            closes: &[0],
            sends: &[1],
            invalid: &[],
            at_ms: 0,
        },
        // A new watcher on a socket whose event is later in the batch: not
        // pending in this iteration.
        before_the_next("create io", Act::CreateIo(1)),
        // Fed before its io event: one call with both, in the io event's
        // place.
        before_the_next("feed", Act::Feed(1)),
        // Cleared before its io event: not invoked, and the clear returns
        // the readiness.
        before_the_next("clear", Act::Clear(1)),
        // An invalid fd is killed (its watchers stopped, the backend told)
        // when the events are queued, before any callback runs: no direct
        // batch for such a poll.
        Case {
            sends: &[0],
            invalid: &[1],
            ..before_the_next("invalid fd", Act::IsActive(1))
        },
        // A one-shot watcher is disarmed when its event is queued: no direct
        // batch while one is active.
        Case {
            watchers: vec![
                watcher(0, vec![vec![Act::IsActive(1)]]),
                Watcher {
                    oneshot: true,
                    ..watcher(1, vec![vec![]])
                },
            ],
            ..before_the_next("one-shot", Act::IsActive(1))
        },
        // A poll's events are pending while the batch holds them: the
        // next poll would not block.
        before_the_next("backend_timeout", Act::BackendTimeout),
        // A one-shot watcher is disarmed in its own callback (the queued
        // path disarmed it when it queued the event; the direct path
        // defers that, and a query counts the mark)...
        oneshot_self(
            "one-shot, deferred disarm: is_active",
            vec![Act::IsActive(0), Act::Start(0), Act::IsActive(0)],
        ),
        // ... so stopping it does nothing, and a start then re-arms it
        // (stop settles the deferred disarm)...
        oneshot_self(
            "one-shot, deferred disarm: stop",
            vec![Act::Stop(0), Act::Start(0)],
        ),
        // ... and its fd has no watcher: another trigger mode may join it
        // (the fd's check settles it).
        oneshot_self(
            "one-shot, deferred disarm: another trigger on its fd",
            vec![Act::CreateIo(0), Act::Start(0)],
        ),
        // Re-armed by its callback (the direct path's shortcut, which lets
        // the flush take the fd's registration from before the report),
        // then stopped: the flush must see the stop.
        oneshot_self(
            "one-shot, re-armed then stopped",
            vec![Act::Start(0), Act::Stop(0)],
        ),
        // Three one-shot watchers read at once; the first stops the second
        // before its event, the third is not re-armed. The queued path
        // listed the three fds as reported before any callback ran, so the
        // flush tells the backend in poll order (the first re-armed, the
        // second and third forgotten, or on the simulator, which emulates
        // one-shot, the second then the third): the direct path, which
        // lists each fd as it reaches it, must too, though the stop changed
        // the second fd first.
        Case {
            name: "one-shot: changed before its report",
            watchers: vec![
                Watcher {
                    oneshot: true,
                    ..watcher(0, vec![vec![Act::Stop(1), Act::Start(0)]])
                },
                Watcher {
                    oneshot: true,
                    ..watcher(1, vec![vec![Act::Start(1)]])
                },
                Watcher {
                    oneshot: true,
                    ..watcher(2, vec![vec![]])
                },
            ],
            closes: &[],
            sends: &[0, 1, 2],
            invalid: &[],
            at_ms: 1,
        },
    ]
}

/// The interest of a program's watcher: reading, one-shot or not.
pub fn interest(oneshot: bool) -> evloop::Interest {
    let trigger = if oneshot {
        evloop::Trigger::Oneshot
    } else {
        evloop::Trigger::Level
    };
    evloop::Interest::READABLE.with_trigger(trigger)
}
