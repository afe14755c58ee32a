//! The bugs planted in the mini backends, one at a time.

/// One planted bug (or none: the base backend).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flaw {
    /// The base backend, which passes the kit.
    None,
    // ------------------------------------------------------ mini poll
    /// An interrupted wait (`EINTR`) returned as an error.
    EintrAsError,
    /// Hang-ups reported as plain readability (no `HUP`), with
    /// `Hangup::Always` declared.
    NoHup,
    /// Errors reported as plain readiness both ways (no `ERROR`).
    NoError,
    /// The timeout rounded down to whole milliseconds, not up.
    TimeoutRoundedDown,
    /// Native one-shot declared, but one-shot registrations kept level:
    /// the fd is reported again and again.
    FalseOneshot,
    /// `ClosedFd::ModifyFails` declared, while a closed fd is reported at
    /// the next wait (`POLLNVAL`), as `AtNextWait` says.
    WrongClosedFd,
    /// A forget (`modify(fd, _, NONE)`) ignored: the fd stays in the set.
    NoDeregistration,
    /// A forget takes the fd out of the set but keeps its entry by number,
    /// and a change is applied to the entry as a delta from `old`: a new
    /// registration of the number inherits the old interest.
    EntryKeptAfterForget,
    /// Edge triggering declared, level delivered.
    EdgeClaimedLevelDelivered,
    // ----------------------------------------------------- mini epoll
    /// Edge-only mechanism, level declared, and no re-arm of the reported
    /// fds before the next wait: level registrations behave as edge.
    NoLevelRearm,
    /// `reinit` does nothing: the epoll instance stays shared with the
    /// parent after `fork`.
    NoReinit,
    /// No rebuild of the epoll instance after a `DEL` that failed (the
    /// number was closed while a dup of its file lives): the old file's
    /// registration stays, and its events arrive under the number.
    NoRebuild,
}
