//! The loop reports iteration, poll (ready count, timeout) and dispatch
//! through `tracing` at trace level. A minimal subscriber records them.

use std::fmt::Write as _;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use evloop::{Interest, Loop, RunMode, Sim};
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Level, Metadata, Subscriber};

#[derive(Clone, Default)]
struct Recorder(Arc<Mutex<Vec<String>>>);

struct Fields(String);

impl Visit for Fields {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        let _ = write!(self.0, " {}={:?}", field.name(), value);
    }
}

impl Subscriber for Recorder {
    fn enabled(&self, _: &Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, _: &Attributes<'_>) -> Id {
        Id::from_u64(1)
    }
    fn record(&self, _: &Id, _: &Record<'_>) {}
    fn record_follows_from(&self, _: &Id, _: &Id) {}
    fn event(&self, event: &Event<'_>) {
        assert_eq!(
            *event.metadata().level(),
            Level::TRACE,
            "hot-path events are trace level"
        );
        let mut f = Fields(String::new());
        event.record(&mut f);
        self.0.lock().unwrap().push(f.0.trim().to_string());
    }
    fn enter(&self, _: &Id) {}
    fn exit(&self, _: &Id) {}
}

#[test]
fn iteration_poll_and_dispatch_are_traced() {
    let rec = Recorder::default();
    let sim = Sim::new();
    let sock = sim.socket("s", 0);
    sim.deliver(Duration::from_millis(2), &sock, b"x");
    tracing::subscriber::with_default(rec.clone(), || {
        let mut lp: Loop = Loop::with_backend(sim.backend());
        lp.io(sock, Interest::READABLE, |lp, _, ev| {
            lp.remove(ev.watcher).unwrap()
        })
        .unwrap();
        lp.run(RunMode::Default, &mut ()).unwrap();
    });
    let lines = rec.0.lock().unwrap().clone();
    let find = |prefix: &str| lines.iter().find(|l| l.starts_with(prefix)).cloned();
    assert_eq!(
        find("message=iteration").unwrap(),
        "message=iteration iteration=1 depth=1"
    );
    assert_eq!(
        find("message=poll").unwrap(),
        "message=poll ready=1 timeout=None"
    );
    assert!(
        find("message=dispatch").unwrap().contains("ready=r"),
        "{lines:?}"
    );
    assert!(find("message=backend modify").is_some(), "{lines:?}");
}
