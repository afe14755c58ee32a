//! Creating a loop on a backend chosen by name: the crate's own OS
//! backends, and those registered with the builder.

use std::borrow::Cow;
use std::ffi::OsString;
use std::sync::Arc;

use crate::backend::Backend;
use crate::backends::{self, Factory};
use crate::direct_batch::PollResults;
use crate::fd_table::FdTable;
use crate::kind::Kinds;
use crate::pending::PendingQueues;
use crate::registry::Registry;
use crate::run_state::RunState;
use crate::timers::Timers;
use crate::{Error, Loop, Result};

/// The environment variable that picks the backend when the program does
/// not (like libev's `LIBEV_FLAGS`): `EVLOOP_BACKEND=poll`. Empty means
/// unset.
const ENV_VAR: &str = "EVLOOP_BACKEND";

/// Builds a [`Loop`] on a backend chosen by name.
///
/// The backend is, in order of precedence: the one named with
/// [`Builder::backend`]; else the one named by the `EVLOOP_BACKEND`
/// environment variable (empty counts as unset), so that a program can be
/// run on another backend without being changed; else the platform's
/// default ([`backends::default_name`]: epoll on Linux, kqueue on macOS and
/// the BSDs, iocp on Windows, poll elsewhere). The names are those of
/// [`backends::AVAILABLE`], those registered for the whole process
/// ([`backends::register`]: what [`Loop::new`] sees too), and those
/// [registered](Builder::register) with the builder: a backend of another crate, or one probed at run time, can
/// be named like the crate's own ([`Builder::available`] lists them all).
///
/// ```
/// use evloop::{Builder, Loop};
/// let lp: Loop = Builder::new().backend("poll").build().unwrap();
/// assert_eq!(lp.backend_name(), "poll");
/// ```
#[derive(Debug, Clone, Default)]
pub struct Builder {
    backend: Option<String>,
    /// Backends registered with [`Builder::register`], in order.
    registered: Vec<(&'static str, Factory)>,
    /// The capacity hint ([`Builder::capacity`]).
    capacity: usize,
    /// A layer over the backend chosen (a recorder: `Builder::record`,
    /// feature `replay`), applied by each build.
    wrap: Option<Wrap>,
}

/// A layer over a built loop's backend, and its name (the
/// [`Error::Backend`] that its failure becomes names it).
#[derive(Clone)]
struct Wrap {
    name: &'static str,
    layer: Arc<WrapFn>,
}

type WrapFn = dyn Fn(Box<dyn Backend>) -> std::io::Result<Box<dyn Backend>> + Send + Sync;

impl std::fmt::Debug for Wrap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Wrap").field(&self.name).finish()
    }
}

impl Builder {
    /// A builder with no explicit backend (see [`Builder`] for the choice).
    ///
    /// ```
    /// let lp: evloop::Loop = evloop::Builder::new().build().unwrap();
    /// assert!(evloop::backends::AVAILABLE.contains(&lp.backend_name()));
    /// ```
    pub fn new() -> Builder {
        Builder::default()
    }

    /// Asks for the backend called `name` ("epoll", "kqueue", "poll",
    /// "select", or one [registered](Builder::register) with this builder),
    /// overriding `EVLOOP_BACKEND`. A name that is neither makes
    /// [`Builder::build`] fail with
    /// [`Error::UnknownBackend`](crate::Error::UnknownBackend), which lists
    /// the names that exist.
    ///
    /// ```
    /// use evloop::{Builder, Error, Loop};
    /// let lp: Loop = Builder::new().backend("select").build().unwrap();
    /// assert_eq!(lp.backend_name(), "select");
    /// let err = Builder::new().backend("nope").build::<()>().unwrap_err();
    /// assert!(matches!(err, Error::UnknownBackend { .. }));
    /// assert!(err.to_string().contains("select"), "{err}");
    /// ```
    pub fn backend(mut self, name: &str) -> Builder {
        self.backend = Some(name.to_string());
        self
    }

    /// Reserves room for `n` watchers (any kind) and for io watchers on
    /// fds numbered below `n`, so that creating that many grows none of
    /// the loop's tables: no reallocation, no copy of what they hold, at
    /// setup or later ([`Loop::reserve`] on a loop already built; what
    /// `with_capacity` is to a `Vec`). Without it the tables grow by
    /// doubling as watchers come, which is cheap on average; the hint is
    /// for a server that knows its connection limit and wants setup
    /// without a growth step (and its pause) along the way.
    ///
    /// The fd table is indexed by fd number, as libev's and libuv's are:
    /// a program whose fds number higher than its count of watchers (its
    /// own files, both ends of socketpairs) gives the highest number it
    /// expects. The timers' heap and the backend's own tables are not
    /// reserved. `0`, the default, reserves nothing.
    ///
    /// ```
    /// use evloop::{Interest, Loop};
    /// use std::os::unix::net::UnixStream;
    ///
    /// let mut lp: Loop = Loop::builder().capacity(1024).build()?;
    /// let (a, _b) = UnixStream::pair()?;
    /// let io = lp.io(a, Interest::READABLE, |_, _, _| {})?;
    /// assert!(lp.is_active(io)?);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn capacity(mut self, n: usize) -> Builder {
        self.capacity = n;
        self
    }

    /// Wraps the backend each build chooses in the layer `layer` makes
    /// (replay's recorder): so that layers above the core (feature
    /// `replay`) reach the builder without the builder naming them. Its
    /// error fails the build as an [`Error::Backend`] named `name`.
    #[cfg_attr(not(feature = "replay"), allow(dead_code))] // nothing else wraps
    pub(crate) fn wrap_backend(
        mut self,
        name: &'static str,
        layer: impl Fn(Box<dyn Backend>) -> std::io::Result<Box<dyn Backend>> + Send + Sync + 'static,
    ) -> Builder {
        self.wrap = Some(Wrap {
            name,
            layer: Arc::new(layer),
        });
        self
    }

    /// Makes a backend created by `open` available under `name` to this
    /// builder only ([`backends::register`] makes one available to every
    /// loop of the process, `Loop::new` included), to
    /// [`Builder::backend`] and to `EVLOOP_BACKEND` alike: a backend of
    /// another crate, or one that probes the kernel when it is created
    /// (and fails there if the kernel refuses; [`Builder::build`] then
    /// returns that error as [`Error::Backend`](crate::Error::Backend)).
    /// It does not change the default. A name registered again replaces
    /// the earlier registration, and a name of the crate's own backends is
    /// replaced for this builder (to wrap one, say).
    ///
    /// ```
    /// use evloop::backend::{Backend, Capabilities, PollEvent, PollStatus};
    /// use evloop::backends::poll::Poll;
    /// use evloop::{Builder, Interest, Loop};
    /// use evloop::RawFd;
    /// use std::{io, time::Duration};
    ///
    /// /// Another crate's backend (here, the crate's poll backend renamed).
    /// struct Mine(Poll);
    /// impl Backend for Mine {
    ///     fn name(&self) -> &'static str { "mine" }
    ///     fn capabilities(&self) -> Capabilities { self.0.capabilities() }
    ///     fn modify(&mut self, fd: RawFd, old: Interest, new: Interest) -> io::Result<()> {
    ///         self.0.modify(fd, old, new)
    ///     }
    ///     fn poll(&mut self, t: Option<Duration>, ev: &mut Vec<PollEvent>) -> io::Result<PollStatus> {
    ///         self.0.poll(t, ev)
    ///     }
    ///     fn now(&mut self) -> Duration { self.0.now() }
    /// }
    ///
    /// let builder = Builder::new().register("mine", || Ok(Box::new(Mine(Poll::new()))));
    /// assert!(builder.available().ends_with(&["mine"]));
    /// // What `EVLOOP_BACKEND=mine` picks, too.
    /// let lp: Loop = builder.clone().backend("mine").build()?;
    /// assert_eq!(lp.backend_name(), "mine");
    ///
    /// // A factory that probes, and is refused here.
    /// let probed = Builder::new()
    ///     .register("probed", || Err(io::Error::from(io::ErrorKind::Unsupported)))
    ///     .backend("probed");
    /// let err = probed.build::<()>().unwrap_err();
    /// assert!(matches!(err, evloop::Error::Backend { backend: "probed", op: "create", .. }));
    /// # Ok::<(), evloop::Error>(())
    /// ```
    pub fn register(mut self, name: &'static str, open: Factory) -> Builder {
        self.registered.retain(|(n, _)| *n != name);
        self.registered.push((name, open));
        self
    }

    /// Every name this builder can build a loop on: the platform's
    /// backends ([`backends::AVAILABLE`], best first), those registered
    /// for the process ([`backends::register`]), then the ones
    /// [registered](Builder::register) with this builder, in the order
    /// they were registered (a registered name that replaces one of the platform's
    /// is listed once, in the platform's place).
    ///
    /// ```
    /// use evloop::{backends, Builder};
    /// assert_eq!(Builder::new().available(), backends::AVAILABLE);
    /// let b = Builder::new().register("other", backends::factory("poll").unwrap());
    /// assert_eq!(b.available().last(), Some(&"other"));
    /// ```
    pub fn available(&self) -> Vec<&'static str> {
        let mut names = backends::names();
        for (name, _) in &self.registered {
            if !names.contains(name) {
                names.push(name);
            }
        }
        names
    }

    /// How the backend called `name` is created: a registered
    /// [`Factory`], else the platform's ([`backends::factory`]); `None` for
    /// a name [`Builder::available`] does not list.
    ///
    /// ```
    /// use evloop::Builder;
    /// let open = Builder::new().factory("poll").unwrap();
    /// assert_eq!(open()?.name(), "poll");
    /// assert!(Builder::new().factory("nope").is_none());
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn factory(&self, name: &str) -> Option<Factory> {
        match self.registered.iter().find(|(n, _)| *n == name) {
            Some((_, open)) => Some(*open),
            None => backends::factory(name),
        }
    }

    /// The name of the backend [`Builder::build`] would use now: the
    /// explicit choice, else `EVLOOP_BACKEND`, else the platform default.
    ///
    /// ```
    /// use evloop::Builder;
    /// assert_eq!(Builder::new().backend("poll").backend_name(), "poll");
    /// let name = Builder::new().backend_name();
    /// match std::env::var("EVLOOP_BACKEND") {
    ///     Ok(v) if !v.is_empty() => assert_eq!(name, v),
    ///     _ => assert_eq!(name, evloop::backends::default_name()),
    /// }
    /// ```
    pub fn backend_name(&self) -> String {
        choose(self.backend.as_deref(), || std::env::var_os(ENV_VAR))
            .0
            .into_owned()
    }

    /// Creates the backend and a loop on it. The same builder can build
    /// any number of loops.
    ///
    /// Errors: [`Error::UnknownBackend`](crate::Error::UnknownBackend) for a
    /// name that does not exist on this platform (whether given to
    /// [`Builder::backend`] or in `EVLOOP_BACKEND`), and
    /// [`Error::Backend`](crate::Error::Backend) if the kernel refused to
    /// create it.
    ///
    /// ```
    /// use evloop::{Builder, Interest, Loop, RunMode};
    /// use std::io::Write;
    /// use std::os::unix::net::UnixStream;
    ///
    /// let mut lp: Loop<usize> = Builder::new().build()?;
    /// let (a, mut b) = UnixStream::pair()?;
    /// b.write_all(b"hi")?;
    /// lp.io(a, Interest::READABLE, |lp, got, ev| {
    ///     use std::io::Read;
    ///     let mut buf = [0; 8];
    ///     *got += ev.source.read(&mut buf).unwrap();
    ///     lp.remove(ev.watcher).unwrap();
    /// })?;
    /// let mut got = 0;
    /// lp.run(RunMode::Default, &mut got)?;
    /// assert_eq!(got, 2);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn build<'s, S>(&self) -> Result<Loop<'s, S>> {
        let (name, from_env) = choose(self.backend.as_deref(), || std::env::var_os(ENV_VAR));
        let mut backend = self.open_named(&name, from_env)?;
        if let Some(w) = &self.wrap {
            backend = (w.layer)(backend).map_err(|source| Error::Backend {
                backend: w.name,
                op: w.name,
                source,
            })?;
        }
        let mut lp = loop_on(backend)?;
        lp.reserve(self.capacity);
        Ok(lp)
    }

    /// Creates the backend called `name`: a registered one, else the
    /// platform's. An unknown name's error lists every name that exists
    /// and says when it came from the environment (a typo there is found
    /// faster).
    fn open_named(&self, name: &str, from_env: bool) -> Result<Box<dyn Backend>> {
        if let Some((name, open)) = self.registered.iter().find(|(n, _)| *n == name) {
            return open().map_err(|source| Error::Backend {
                backend: name,
                op: "create",
                source,
            });
        }
        backends::open(name).map_err(|err| match err {
            Error::UnknownBackend { name, .. } => Error::UnknownBackend {
                name,
                available: self.available(),
                env_var: from_env.then_some(ENV_VAR),
            },
            err => err,
        })
    }
}

/// The backend name, and whether it came from the environment: `explicit`,
/// else a non-empty `env()` value (the environment is read only when
/// needed), else the platform default. A non-UTF-8 `env()` value is passed
/// on (lossily) so that it is refused with a message showing it.
fn choose(explicit: Option<&str>, env: impl FnOnce() -> Option<OsString>) -> (Cow<'_, str>, bool) {
    if let Some(name) = explicit {
        return (Cow::Borrowed(name), false);
    }
    match env() {
        Some(v) if !v.is_empty() => (Cow::Owned(v.to_string_lossy().into_owned()), true),
        _ => (Cow::Borrowed(backends::default_name()), false),
    }
}

/// `Loop::from` a boxed backend, with running out of loop ids as an error.
fn loop_on<'s, S>(mut backend: Box<dyn Backend + 's>) -> Result<Loop<'s, S>> {
    let registry = Registry::new().ok_or(Error::LoopIdsExhausted)?;
    let caps = backend.capabilities();
    let timers = Timers::new(backend.now());
    let report_dispatch = backend.notices().is_some_and(|s| s.wants_dispatch());
    let notifier = crate::services::own(backend.name());
    Ok(Loop {
        backend,
        caps,
        registry,
        fds: FdTable::default(),
        results: PollResults::default(),
        timers,
        pending: PendingQueues::default(),
        run: RunState::default(),
        report_dispatch,
        notifier,
        kinds: Kinds::default(),
    })
}

/// A loop on an already boxed backend (what a [`Factory`](crate::backends::Factory)
/// opens): [`Loop::with_backend`] without a second box.
impl<'s, S> From<Box<dyn Backend + 's>> for Loop<'s, S> {
    /// A loop on an already boxed backend (what [`Builder`](crate::Builder)
    /// produces).
    ///
    /// ```
    /// use evloop::backend::Backend;
    /// use evloop::{Loop, Sim};
    /// let b: Box<dyn Backend> = Box::new(Sim::new().backend());
    /// let lp: Loop = Loop::from(b);
    /// assert_eq!(lp.backend_name(), "sim");
    /// ```
    ///
    /// # Panics
    ///
    /// If the process has made 2^32 - 1 loops already: a loop's id is
    /// never reused, so that a handle of a dropped loop can never be taken
    /// for another's. [`Builder::build`](crate::Builder::build) returns
    /// [`Error::LoopIdsExhausted`](crate::Error::LoopIdsExhausted) instead.
    fn from(backend: Box<dyn Backend + 's>) -> Self {
        match loop_on(backend) {
            Ok(lp) => lp,
            Err(e) => panic!("{e}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn choice_order() {
        let env = |s: &'static str| move || Some(OsString::from(s));
        let unread = || -> Option<OsString> { panic!("the environment was read") };
        let name = |c: (Cow<'_, str>, bool)| (c.0.into_owned(), c.1);
        let default = backends::default_name().to_string();
        assert_eq!(
            name(choose(Some("select"), unread)),
            ("select".into(), false)
        );
        assert_eq!(name(choose(None, env("poll"))), ("poll".into(), true));
        assert_eq!(name(choose(None, env(""))), (default.clone(), false));
        assert_eq!(name(choose(None, || None)), (default, false));
        assert_eq!(name(choose(None, env("bogus"))), ("bogus".into(), true));
    }

    #[test]
    fn an_unknown_name_from_the_environment_says_so() {
        let b = Builder::new();
        let Err(from_env) = b.open_named("bogus", true) else {
            panic!("bogus backend opened")
        };
        let msg = from_env.to_string();
        assert!(
            msg.contains("\"bogus\"") && msg.contains("environment variable EVLOOP_BACKEND"),
            "{msg}"
        );
        let Err(explicit) = b.open_named("bogus", false) else {
            panic!("bogus backend opened")
        };
        assert!(!explicit.to_string().contains("EVLOOP_BACKEND"));
    }

    #[test]
    #[cfg_attr(
        target_os = "wasi",
        ignore = "it registers under the poll backend's name, which WASI has not"
    )]
    fn registered_backends_are_named_like_the_platforms() {
        let renamed: Factory = || backends::open("poll").map_err(std::io::Error::other);
        let b = Builder::new().register("other", renamed);
        assert!(b.open_named("other", true).is_ok());
        let Err(err) = b.open_named("bogus", true) else {
            panic!("bogus backend opened")
        };
        let msg = err.to_string();
        let known = format!("known here: {}, other", backends::AVAILABLE.join(", "));
        assert!(msg.ends_with(&known), "{msg}");
        // Registered again: replaced, listed once.
        let b = b.register("other", renamed).register("poll", renamed);
        let mut want = backends::AVAILABLE.to_vec();
        want.push("other");
        assert_eq!(b.available(), want);
        assert_eq!(b.registered.len(), 2);
    }
}
