//! The doc examples (in `src/`, `backends/` and README.md) whose run ends
//! by running out of watchers, one test per item, named after it, each on
//! every backend (the OS backends only where the example needs what the
//! simulator has not): a doc example runs on the default backend only, and
//! the simulator's `Stalled` once hid a run that blocked forever on a
//! kernel. Virtual times become lower bounds on real time; scheduled
//! arrivals become bytes a peer sends.
//!
//! Examples that run a loop but are not mirrored (and those mirrored in part),
//! one line each:
//! - `RunMode`: a `NoWait` run, which cannot block.
//! - `Check::new`: a `NoWait` run again (with `Default` it hangs on kernels: see `a_check_watcher_alone_runs_and_the_run_ends` in loop_core.rs).
//! - `Loop::run`: a `Once` run that ends `IterationDone` with its prepare and check watchers still active.
//! - `Sim` and `Step`: they show the simulator's `Stalled` and its trace, which only it has.
//! - `AsyncSender::send`: a `NoWait` run.
//! - `Loop::is_pending`: a `NoWait` run.
//! - `Loop::backend_timeout` (its second example): a `Once` run whose prepare watchers see the simulator's exact timeout (`tests/libev_api.rs` checks it on every backend).
//! - `Sim::reap_elsewhere`: the simulator's own call (its kernel counterpart is `exit_status_unknown_example`).
//! - `Conn::write`, `Conn::pause_reading`, `Conn::resume_reading`: `NoWait` runs.
//! - Mirrored although they end `Broken` (a `Default` run that must return): `Break`, `Loop::break_loop`, `Acceptor`, `Conn::input`, and the first run of the `net` module's example.
//! - Mirrored on the OS backends only, as the examples themselves run on real sockets (the simulator has no TCP and no half-close): `net`, `Acceptor`, `Conns::open`.
//! - Mirrored without their simulator-only parts (the trace line, the virtual wall clock's hour): `Sim::raise`, `Sim::call_at`, `Periodic::new`, `Schedule::every`.
//! - Mirrored without the program that cannot start on the simulator, which starts no program: `Child::spawn`.
//! - `Child::any`: `Once` runs; and a watcher of any child reaps every child of the process, which the other tests here spawn and wait for (`tests/child_any.rs` runs it on every backend, alone).
//! - `Sim::exit`, `Sim::signals_sent`: the simulator's own calls (their kernel counterparts are `loop_kill_example` and `tests/child_any.rs`).
//!
//! The other examples run no loop: `PollEvent`, `Capabilities`, `PollStatus`,
//! `Builder`, `Builder::new`, `Builder::backend`, `Builder::backend_name`,
//! `Loop::builder`, `Error`, `Result`, `MIN_PRIORITY`, `Loop::with_backend`,
//! `Loop::from` (a boxed backend), `Loop::backend_name`, `Loop::capabilities`,
//! `Loop::now`, `Loop::read_wall_clock`, `Loop::update_now`, `Loop::pending_count`,
//! `Loop::backend_timeout`, `Loop::set_direct_dispatch`, `Loop::iteration`,
//! `Loop::active_count`, `Loop::reinit_after_fork`, `Interest`, `Trigger`,
//! `Ready`, `SourceFd`, `VirtualFd`, `Source`, `Loop::start`, `Loop::remove`,
//! `Io::into_source`, `Loop::is_active`, `Loop::is_pending`,
//! `Loop::set_priority`, `Loop::priority`, `Io::set_interest`,
//! `Io::interest`, `Io::fd`, `Timer::set`, `Timer::again`,
//! `Timer::repeat`, `Timer::remaining`, `Loop::clear_pending`, `Handle`, `Io`,
//! `Timer`, `Prepare`, `Check`, `Signal`, `Signal::number`, `Async`,
//! `Async::sender`, `Callback`, `Cleanup::set_callback`,
//! `Signal::set_number`, `Periodic::set_schedule`, `Fork`, `Cleanup`, `OnceEvent`, `Periodic`,
//! `Periodic::next_at`, `Schedule`, `Schedule::every_from`, `Stat`, `Stat::file_stat`, `FileStat`,
//! `FileStat::of`, `ExitStatus` (but `ExitStatus::Unknown` is mirrored), `ChildExit`, `SignalSet`, `Notices`, `Wake`,
//! `Signal::name`, `Spawned`, `Spawned::from_std`,
//! `unsupported`; `NoticeService::watch_clock_steps` and `NoticeService::watch_path`
//! (they call the default backend directly; the second polls it until its
//! path notice comes, which it does on every backend here); the backends'
//! types and constructors (`Epoll`, `Poll`, `Select`, `Kqueue`, `IoUring`,
//! their `new`, `Loop::force_sigchld_fallback`, and
//! `IoUring::force_no_multishot` and `IoUring::without_deferred_task_work`:
//! they call `poll` directly or nothing), `backends`, `AVAILABLE`, `default_name`, `open`, `fd_io` with
//! its `read` and `write`; the simulator's scheduling and inspection calls
//! (all but `Sim::raise` and `Sim::call_at`, mirrored above: `Sim::new`,
//! `Sim::backend`, `Sim::socket`, `Sim::pair`, `Sim::deliver`,
//! `Sim::free_send`, `Sim::close_peer`, `Sim::invalidate`,
//! `Sim::spurious_wakeup`, `Sim::fail_next_modify`, `Sim::spawn`,
//! `Sim::exit`, `Sim::set_wall_clock`, `Sim::wall_clock`,
//! `Sim::step_wall_clock_forward`, `Sim::step_wall_clock_back`,
//! `Sim::report_clock_steps`, `Sim::write_file`, `Sim::rename_file`,
//! `Sim::remove_file`, `Sim::path_hints`, `Sim::watched_signals`,
//! `Sim::child_name`, `Sim::now`, `Sim::trace`, `Sim::trace_lines`,
//! `Sim::clear_trace`, `Sim::modify_count`, `Sim::poll_count`, `Sim::sent`,
//! `Sim::buffered`, `Sim::send_capacity`, `Sim::registered`; `SimFd`,
//! `SimBackend`, `SimSocket`, `SimSocket::fd`, `SimSocket::name`,
//! `StepKind`); and in `net`: `ListenOptions` with `new`,
//! `backlog`, `backlog_len`, `reuse_address`, `reuse_port` and `bind`;
//! `fd_limits`, `raise_fd_limit`; `AcceptOptions` with `new`, `backoff` and
//! `backoff_delay`; `Acceptor::start`, `Acceptor::with_options`,
//! `Acceptor::local_addr`, `Acceptor::watcher`, `Acceptor::accepted`,
//! `Acceptor::errors_reported`, `Acceptor::failed_attempts`,
//! `Acceptor::is_backing_off`, `Acceptor::pause`, `Acceptor::resume`,
//! `Acceptor::close`; `Stream`, `ConnId`, `CloseReason`,
//! `CloseReason::is_clean`, `ConnEvent`, `ConnOptions` with `new`,
//! `read_buffer`, `read_buffer_len`, `watermarks`, `watermark_levels`,
//! `idle_timeout`, `idle_timeout_len`, `linger` and `linger_len`;
//! `Conn::queued`, `Conn::is_congested`, `Conn::is_eof`, `Conn::is_closing`,
//! `Conn::watcher`; `Conns::new`, `Conns::len`, `Conns::is_empty`,
//! `Conns::contains`, `Conns::get`, `Conns::get_mut`, `Conns::iter`,
//! `Conns::iter_mut`.

mod loop_api;
mod net;
mod processes;
mod timers_and_files;
