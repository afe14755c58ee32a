//! The hot path allocates nothing once warmed up: dispatching io events,
//! restarting timers, running iterations; and a dropped executor leaves
//! nothing allocated (allocations minus frees). Proven with the conformance
//! kit's counting global allocator, whose count is per thread: the tests of
//! this binary run in parallel, and each must see only its own
//! allocations.

use std::io;
use std::time::Duration;

use evloop::backend::{Backend, Capabilities, PollEvent, PollStatus};
use evloop::conformance::{self, CountingAllocator, Outcome};
use evloop::exec::{spawn_on, Executor};
use evloop::{
    Check, Idle, Interest, Loop, Prepare, RawFd, Ready, RunMode, Source, SourceFd, Timer, VirtualFd,
};

#[global_allocator]
static GLOBAL: CountingAllocator = CountingAllocator;

/// Allocations made by `f` on this thread.
fn allocations_in(f: impl FnOnce()) -> u64 {
    CountingAllocator::allocations_in(f)
}

/// A backend defined outside the crate: every registered fd is always
/// ready for what it asks; time advances by the timeout (or 1ms).
struct AlwaysReady {
    now: Duration,
    interest: Vec<Interest>,
}

impl Backend for AlwaysReady {
    fn name(&self) -> &'static str {
        "always-ready"
    }
    fn capabilities(&self) -> Capabilities {
        Capabilities {
            virtual_fds: true,
            ..Capabilities::default()
        }
    }
    fn modify(&mut self, fd: RawFd, _old: Interest, new: Interest) -> io::Result<()> {
        let i = fd as usize;
        if i >= self.interest.len() {
            self.interest.resize(i + 1, Interest::NONE);
        }
        self.interest[i] = new;
        Ok(())
    }
    fn poll(
        &mut self,
        timeout: Option<Duration>,
        events: &mut Vec<PollEvent>,
    ) -> io::Result<PollStatus> {
        for (fd, i) in self.interest.iter().enumerate() {
            if !i.is_empty() {
                events.push(PollEvent {
                    fd: fd as RawFd,
                    ready: Ready::from_interest(*i),
                });
            }
        }
        self.now += timeout
            .unwrap_or(Duration::from_millis(1))
            .min(Duration::from_millis(1));
        Ok(PollStatus::Done)
    }
    fn now(&mut self) -> Duration {
        self.now
    }
}

struct Vfd(RawFd);
impl Source for Vfd {
    fn source_fd(&self) -> SourceFd<'_> {
        SourceFd::Virtual(VirtualFd::new(self.0))
    }
}

#[derive(Default)]
struct Stats {
    io: u64,
    timer_restarts: u64,
    fired: u64,
    checks: u64,
}

#[test]
fn steady_state_iterations_allocate_nothing() {
    // Mixed priorities: every io event becomes a pending entry.
    steady_state(true);
    // All at the default priority: io events are dispatched straight from
    // the poll results, and each callback's `set_interest` turns the rest
    // of the batch into pending entries (src/direct_batch.rs) every iteration.
    steady_state(false);
}

fn steady_state(mixed_priorities: bool) {
    let backend = AlwaysReady {
        now: Duration::ZERO,
        interest: Vec::new(),
    };
    let mut lp: Loop<Stats> = Loop::with_backend(backend);
    // 100 connections, each with an inactivity timer pushed back on every
    // event (the libev `ev_timer_again` pattern), at mixed priorities.
    for (i, fd) in (0..100).enumerate() {
        let timeout = lp
            .timer(Duration::ZERO, Duration::from_secs(5), |_, st, _| {
                st.fired += 1
            })
            .unwrap();
        timeout.again(&mut lp).unwrap();
        let io = lp
            .io(Vfd(fd), Interest::READABLE, move |lp, st, ev| {
                st.io += 1;
                timeout.again(lp).unwrap();
                st.timer_restarts += 1;
                // Toggle interest and back: marks the fd, no backend call.
                ev.watcher.set_interest(lp, Interest::BOTH).unwrap();
                ev.watcher.set_interest(lp, Interest::READABLE).unwrap();
            })
            .unwrap();
        if mixed_priorities {
            lp.set_priority(io, (i % 5) as i32 - 2).unwrap();
        }
    }
    // Short repeating timers fire and are rescheduled every iteration.
    for _ in 0..10 {
        lp.timer(
            Duration::from_millis(1),
            Duration::from_millis(1),
            |_, st, _| st.fired += 1,
        )
        .unwrap();
    }
    Check::new(&mut lp, |_, st, _| st.checks += 1).unwrap();
    Prepare::new(&mut lp, |_, _, _| {}).unwrap();

    let mut st = Stats::default();
    for _ in 0..50 {
        lp.run(RunMode::Once, &mut st).unwrap();
    }
    let n = allocations_in(|| {
        for _ in 0..1000 {
            lp.run(RunMode::Once, &mut st).unwrap();
        }
    });
    assert_eq!(st.io, 1050 * 100);
    assert_eq!(st.timer_restarts, 1050 * 100);
    assert!(st.fired >= 1000 * 10);
    assert_eq!(st.checks, 1050);
    assert_eq!(n, 0, "{n} allocations in 1000 steady-state iterations");

    // The counter works: creating a watcher allocates its callback box
    // (unless the closure captures nothing: a box of nothing is free).
    let captured = st.io;
    let n = allocations_in(|| {
        Idle::new(&mut lp, move |_, st, _| st.io += captured).unwrap();
    });
    assert!(n > 0);
}

/// The same on every kernel backend of the host: the kit's no-allocation
/// check (socket pairs, a byte read per callback, a timer pushed back per
/// event).
#[test]
fn steady_state_on_every_os_backend_allocates_nothing() {
    for &name in evloop::backends::AVAILABLE {
        let open = evloop::backends::factory(name).unwrap();
        let outcome = conformance::no_allocation(name, open);
        assert_eq!(outcome, Outcome::Passed, "{name}");
    }
}

/// A backend that accepts every virtual fd and reports nothing, with no
/// table of its own: what the loop allocates is all that is counted.
struct Quiet(Duration);

impl Backend for Quiet {
    fn name(&self) -> &'static str {
        "quiet"
    }
    fn capabilities(&self) -> Capabilities {
        Capabilities {
            virtual_fds: true,
            ..Capabilities::default()
        }
    }
    fn modify(&mut self, _: RawFd, _: Interest, _: Interest) -> io::Result<()> {
        Ok(())
    }
    fn poll(
        &mut self,
        timeout: Option<Duration>,
        _: &mut Vec<PollEvent>,
    ) -> io::Result<PollStatus> {
        self.0 += timeout.unwrap_or(Duration::ZERO);
        Ok(PollStatus::Done)
    }
    fn now(&mut self) -> Duration {
        self.0
    }
}

/// Setup within the capacity hint grows no vector of the loop: after
/// `Builder::capacity(N)`, creating N io watchers (and flushing them to
/// the backend, removing them all and creating N again) allocates exactly
/// one box per watcher, its callback with the source it owns; a growth
/// of the registry, the fd table or the change list would be one more
/// allocation or reallocation, which the counter counts too. Without
/// the hint the same setup grows them.
#[test]
fn io_watchers_within_the_capacity_grow_no_vector() {
    const N: usize = 5_000;
    let quiet: evloop::backends::Factory = || Ok(Box::new(Quiet(Duration::ZERO)));
    let setup = |capacity: usize| {
        let builder = Loop::builder()
            .register("quiet", quiet)
            .backend("quiet")
            .capacity(capacity);
        let mut lp: Loop = builder.build().unwrap();
        let mut watchers = Vec::with_capacity(N);
        let mut counts = [0; 2];
        for count in &mut counts {
            *count = allocations_in(|| {
                for fd in 0..N {
                    let io = lp.io(Vfd(fd as RawFd), Interest::READABLE, |_, _, _| {});
                    watchers.push(io.unwrap());
                }
                lp.run(RunMode::NoWait, &mut ()).unwrap();
                for io in watchers.drain(..) {
                    lp.remove(io).unwrap();
                }
            });
        }
        counts
    };
    assert_eq!(
        setup(N),
        [N as u64; 2],
        "one box per watcher, nothing grown"
    );
    let [first, again] = setup(0);
    assert!(
        first > N as u64,
        "without the hint the tables grow: {first}"
    );
    assert_eq!(again, N as u64, "once grown, the tables are kept");
}

/// Tasks in steady state allocate nothing either, on every kernel
/// backend: two tasks play ping-pong over a loopback TCP pair
/// (`exec::AsyncFd`: waits, wakes, the executor's passes, the reactor's
/// requests) and one sleeps in a loop (`exec::sleep`: a timer slot and
/// its stopped watcher taken again each time).
#[test]
fn steady_state_tasks_allocate_nothing() {
    use evloop::exec::{sleep, AsyncFd};
    use std::net::{TcpListener, TcpStream};
    for &name in evloop::backends::AVAILABLE {
        let mut lp: Loop = Loop::builder().backend(name).build().unwrap();
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let a = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (b, _) = l.accept().unwrap();
        let ex = Executor::of(&mut lp).unwrap();
        let (a, b) = (
            AsyncFd::with_executor(&ex, a).unwrap(),
            AsyncFd::with_executor(&ex, b).unwrap(),
        );
        spawn_on(&mut lp, async move {
            let mut buf = [0u8; 1];
            loop {
                a.write_all(b"p").await.unwrap();
                assert_eq!(a.read(&mut buf).await.unwrap(), 1);
            }
        })
        .unwrap();
        spawn_on(&mut lp, async move {
            let mut buf = [0u8; 1];
            loop {
                assert_eq!(b.read(&mut buf).await.unwrap(), 1);
                b.write_all(b"q").await.unwrap();
            }
        })
        .unwrap();
        spawn_on(&mut lp, async {
            loop {
                sleep(Duration::from_micros(100)).await;
            }
        })
        .unwrap();
        let mut run = |n: usize| {
            for _ in 0..n {
                lp.run(RunMode::Once, &mut ()).unwrap();
            }
        };
        run(200); // warm up: vectors, slabs, queues at their sizes
        let allocated = allocations_in(|| run(300));
        assert_eq!(allocated, 0, "{name}: tasks in steady state allocated");
    }
}

/// Self-freeing timers churned in steady state, a timer per request as a
/// server makes them (`Timer::once`): each allocates its callback's
/// box and nothing more, however many fired, on a backend of no tables of
/// its own and on every kernel backend: the registry, the timer heap and
/// the queues keep their size. With `Loop::timer` and no `remove`, the
/// fired timers stay and the registry grows.
#[test]
fn churned_self_freeing_timers_allocate_only_their_callbacks() {
    const BATCH: u64 = 1000;
    const ROUNDS: u64 = 100;
    let quiet: evloop::backends::Factory = || Ok(Box::new(Quiet(Duration::ZERO)));
    let mut names = vec!["quiet"];
    names.extend_from_slice(evloop::backends::AVAILABLE);
    for name in names {
        let mut lp: Loop<u64> = Loop::builder()
            .register("quiet", quiet)
            .backend(name)
            .build()
            .unwrap();
        let mut sum = 0;
        let mut round = |lp: &mut Loop<u64>, once: bool| {
            for i in 0..BATCH {
                let after = Duration::from_micros(i % 3);
                if once {
                    Timer::once(lp, after, move |_, sum| *sum += i).unwrap();
                } else {
                    lp.timer(after, Duration::ZERO, move |_, sum, _| *sum += i)
                        .unwrap();
                }
            }
            lp.run(RunMode::Default, &mut sum).unwrap();
        };
        round(&mut lp, true); // warm up: the tables at their sizes
        let n = allocations_in(|| (0..ROUNDS).for_each(|_| round(&mut lp, true)));
        assert_eq!(
            n,
            ROUNDS * BATCH,
            "{name}: one box per timer, nothing grown"
        );
        assert_eq!(lp.watcher_count(), 0, "{name}");
        let n = allocations_in(|| (0..ROUNDS).for_each(|_| round(&mut lp, false)));
        assert!(
            n > ROUNDS * BATCH,
            "{name}: kept timers grow the tables: {n}"
        );
        assert_eq!(lp.watcher_count(), (ROUNDS * BATCH) as usize, "{name}");
    }
}

/// A loop dropped with tasks still queued (spawned and never polled), or
/// whose task's waker is woken after the drop, leaves nothing allocated:
/// each queued waker holds the run queue, a cycle the executor's drop
/// breaks (it had leaked 4 blocks per loop, 10,004 with 10,000 tasks
/// queued). On the simulator and every OS backend.
#[test]
fn a_dropped_executor_leaves_nothing_allocated() {
    use evloop::exec::JoinHandle;
    use evloop::Sim;
    use std::cell::RefCell;
    use std::rc::Rc;
    use std::task::{Poll, Waker};
    let mut names = vec!["sim"];
    names.extend_from_slice(evloop::backends::AVAILABLE);
    for name in names {
        let new_loop = || -> Loop {
            match name {
                "sim" => Loop::with_backend(Sim::new().backend()),
                _ => Loop::builder().backend(name).build().unwrap(),
            }
        };
        let queued = |tasks: usize| {
            let mut lp = new_loop();
            for _ in 0..tasks {
                drop(spawn_on(&mut lp, async {}).unwrap());
            }
            drop(lp);
        };
        // A task that keeps its waker where the test can wake it.
        let woken_after = || {
            let mut lp = new_loop();
            let kept: Rc<RefCell<Option<Waker>>> = Rc::default();
            let k = kept.clone();
            let task: JoinHandle<()> = spawn_on(
                &mut lp,
                std::future::poll_fn(move |cx| {
                    *k.borrow_mut() = Some(cx.waker().clone());
                    Poll::Pending
                }),
            )
            .unwrap();
            lp.run(RunMode::NoWait, &mut ()).unwrap();
            drop((lp, task));
            let waker = kept.borrow_mut().take().unwrap();
            waker.wake_by_ref();
            waker.wake();
        };
        // Each case run once first, then measured: the thread's table of
        // executors at its size, and what a backend keeps past its loop
        // at the same shape (the emulated kqueue keeps a dropped queue's
        // entry until a new queue takes its number).
        let net = |f: &dyn Fn()| {
            f();
            CountingAllocator::net_allocations_in(f)
        };
        assert_eq!(net(&|| queued(1)), 0, "{name}: one task queued");
        assert_eq!(net(&|| queued(10_000)), 0, "{name}: 10,000 tasks queued");
        assert_eq!(net(&woken_after), 0, "{name}: woken after the drop");
    }
}
