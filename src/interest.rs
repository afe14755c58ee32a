//! What an io watcher asks for ([`Interest`]), how it is triggered
//! ([`Trigger`]) and what a backend reports ([`Ready`]).

use std::fmt;
use std::ops::{BitAnd, BitOr, BitOrAssign};

/// The readiness an io watcher waits for, plus its trigger mode.
///
/// An interest is a small bit set: [`Interest::READABLE`],
/// [`Interest::WRITABLE`], or both. The trigger mode ([`Trigger`]) rides in
/// the same value so that a backend sees the complete registration of an fd
/// in one number.
///
/// ```
/// use evloop::{Interest, Trigger};
/// let both = Interest::READABLE | Interest::WRITABLE;
/// assert!(both.is_readable() && both.is_writable());
/// assert_eq!(both.trigger(), Trigger::Level);
/// assert_eq!(both.with_trigger(Trigger::Oneshot).trigger(), Trigger::Oneshot);
/// assert_eq!(format!("{}", Interest::READABLE), "r");
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Interest(u8);

const R: u8 = 1;
const W: u8 = 2;
const MODE_SHIFT: u8 = 4;
const MODE_MASK: u8 = 0b11 << MODE_SHIFT;

impl Interest {
    /// No readiness at all: the fd is not registered with the backend.
    pub const NONE: Interest = Interest(0);
    /// Wake when the fd can be read without blocking (or has hit EOF).
    pub const READABLE: Interest = Interest(R);
    /// Wake when the fd can be written without blocking.
    pub const WRITABLE: Interest = Interest(W);
    /// Both [`READABLE`](Self::READABLE) and [`WRITABLE`](Self::WRITABLE).
    pub const BOTH: Interest = Interest(R | W);

    /// Whether this interest includes readability.
    pub const fn is_readable(self) -> bool {
        self.0 & R != 0
    }

    /// Whether this interest includes writability.
    pub const fn is_writable(self) -> bool {
        self.0 & W != 0
    }

    /// Whether neither readability nor writability is asked for.
    pub const fn is_empty(self) -> bool {
        self.0 & (R | W) == 0
    }

    /// The readable/writable part, with the trigger mode cleared (level).
    pub const fn events(self) -> Interest {
        Interest(self.0 & (R | W))
    }

    /// The trigger mode of this interest.
    pub const fn trigger(self) -> Trigger {
        match (self.0 & MODE_MASK) >> MODE_SHIFT {
            0 => Trigger::Level,
            1 => Trigger::Oneshot,
            _ => Trigger::Edge,
        }
    }

    /// Whether the trigger mode is [`Trigger::Oneshot`] (a cheaper test
    /// than comparing [`Interest::trigger`], for the hot path).
    #[inline]
    pub const fn is_oneshot(self) -> bool {
        self.0 & MODE_MASK == 1 << MODE_SHIFT
    }

    /// The same events with another trigger mode.
    pub const fn with_trigger(self, trigger: Trigger) -> Interest {
        let mode = match trigger {
            Trigger::Level => 0,
            Trigger::Oneshot => 1,
            Trigger::Edge => 2,
        };
        Interest((self.0 & !MODE_MASK) | (mode << MODE_SHIFT))
    }

    /// The raw bits, for backends that keep interests in tables.
    pub const fn bits(self) -> u8 {
        self.0
    }

    /// The interest with these raw bits ([`Interest::bits`]): how a
    /// recorded trace (`evloop::replay`) is read back.
    #[cfg_attr(not(feature = "replay"), allow(dead_code))] // the trace decoder
    pub(crate) const fn from_bits(bits: u8) -> Interest {
        Interest(bits)
    }
}

impl BitOr for Interest {
    type Output = Interest;
    /// Union of the events; the trigger mode of the left side is kept unless
    /// it is level, in which case the right side's is used.
    fn bitor(self, rhs: Interest) -> Interest {
        let mode = if self.0 & MODE_MASK != 0 {
            self.0 & MODE_MASK
        } else {
            rhs.0 & MODE_MASK
        };
        Interest(((self.0 | rhs.0) & (R | W)) | mode)
    }
}

impl BitOrAssign for Interest {
    fn bitor_assign(&mut self, rhs: Interest) {
        *self = *self | rhs;
    }
}

impl fmt::Display for Interest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = match self.0 & (R | W) {
            0 => "-",
            R => "r",
            W => "w",
            _ => "rw",
        };
        f.write_str(s)?;
        match self.trigger() {
            Trigger::Level => Ok(()),
            Trigger::Oneshot => f.write_str("/oneshot"),
            Trigger::Edge => f.write_str("/edge"),
        }
    }
}

impl fmt::Debug for Interest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Interest({self})")
    }
}

/// How readiness is reported for an io watcher.
///
/// ```
/// use evloop::{Interest, Trigger};
/// let i = Interest::READABLE.with_trigger(Trigger::Edge);
/// assert_eq!(i.trigger(), Trigger::Edge);
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default)]
pub enum Trigger {
    /// Reported on every iteration while the condition holds (epoll's and
    /// libev's default). Supported by every backend.
    #[default]
    Level,
    /// Reported once, then the watcher is stopped until started again
    /// ("re-armed"). Native on epoll and kqueue, emulated by the loop
    /// elsewhere. Forgetting to re-arm means never hearing from the fd again.
    Oneshot,
    /// Reported when the condition changes from false to true. Only epoll and
    /// kqueue offer it; the callback must read or write until `WouldBlock`,
    /// or the rest of the data is never announced again.
    Edge,
}

/// What a backend reports for an fd, and what an io callback receives.
///
/// Besides [`READABLE`](Self::READABLE) and [`WRITABLE`](Self::WRITABLE), a
/// backend may report [`HUP`](Self::HUP) (the peer hung up: the next read
/// returns EOF) and [`ERROR`](Self::ERROR) (an error is pending on the fd, or
/// the fd turned out to be invalid; the loop then stops the watchers on it).
///
/// ```
/// use evloop::Ready;
/// let r = Ready::READABLE | Ready::HUP;
/// assert!(r.is_readable() && r.is_hup() && !r.is_error());
/// assert_eq!(r.to_string(), "r|hup");
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Ready(u8);

impl Ready {
    /// Nothing.
    pub const EMPTY: Ready = Ready(0);
    /// The fd can be read (data or EOF).
    pub const READABLE: Ready = Ready(R);
    /// The fd can be written.
    pub const WRITABLE: Ready = Ready(W);
    /// The peer hung up; reads will return EOF once the buffer is drained.
    pub const HUP: Ready = Ready(4);
    /// An error is pending on the fd (`EPOLLERR`, `POLLERR`): the next read
    /// or write returns it. When the loop itself sends `ERROR` because the
    /// fd is unusable (the backend refused it, or reported it
    /// [`INVALID`](Self::INVALID)), the watchers have been stopped.
    pub const ERROR: Ready = Ready(8);
    /// The fd is no longer valid (closed behind the loop's back, `POLLNVAL`,
    /// `EBADF`). The loop turns it into [`ERROR`](Self::ERROR) for every
    /// watcher on the fd and stops them.
    pub const INVALID: Ready = Ready(16);

    /// Whether `READABLE` is set.
    pub const fn is_readable(self) -> bool {
        self.0 & R != 0
    }
    /// Whether `WRITABLE` is set.
    pub const fn is_writable(self) -> bool {
        self.0 & W != 0
    }
    /// Whether `HUP` is set.
    pub const fn is_hup(self) -> bool {
        self.0 & 4 != 0
    }
    /// Whether `ERROR` is set.
    pub const fn is_error(self) -> bool {
        self.0 & 8 != 0
    }
    /// Whether `INVALID` is set.
    pub const fn is_invalid(self) -> bool {
        self.0 & 16 != 0
    }
    /// Whether no bit is set.
    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }
    /// Whether every bit of `other` is set in `self`.
    pub const fn contains(self, other: Ready) -> bool {
        self.0 & other.0 == other.0
    }
    /// The part of this readiness that a watcher with `interest` receives:
    /// the requested readable/writable bits, plus `HUP` and `ERROR`, which
    /// are always delivered.
    pub const fn filter(self, interest: Interest) -> Ready {
        Ready(self.0 & Ready::receive_mask(interest).0)
    }
    /// The bits a watcher with `interest` receives (see [`Ready::filter`]),
    /// precomputed per watcher so that dispatch filters with one AND.
    pub(crate) const fn receive_mask(interest: Interest) -> Ready {
        Ready(interest.0 & (R | W) | 4 | 8)
    }
    /// The readiness that corresponds to an interest (readable/writable bits).
    pub const fn from_interest(interest: Interest) -> Ready {
        Ready(interest.0 & (R | W))
    }
    /// The raw bits.
    pub const fn bits(self) -> u8 {
        self.0
    }

    /// The readiness with these raw bits ([`Ready::bits`]): how a
    /// recorded trace (`evloop::replay`) is read back, and how a
    /// watcher's deferred events are kept (registry.rs).
    pub(crate) const fn from_bits(bits: u8) -> Ready {
        Ready(bits)
    }
}

impl BitOr for Ready {
    type Output = Ready;
    fn bitor(self, rhs: Ready) -> Ready {
        Ready(self.0 | rhs.0)
    }
}

impl BitOrAssign for Ready {
    fn bitor_assign(&mut self, rhs: Ready) {
        self.0 |= rhs.0;
    }
}

impl BitAnd for Ready {
    type Output = Ready;
    fn bitand(self, rhs: Ready) -> Ready {
        Ready(self.0 & rhs.0)
    }
}

impl fmt::Display for Ready {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_empty() {
            return f.write_str("-");
        }
        let rw = match self.0 & (R | W) {
            0 => "",
            R => "r",
            W => "w",
            _ => "rw",
        };
        let mut first = rw.is_empty();
        f.write_str(rw)?;
        for (bit, name) in [(4u8, "hup"), (8, "err"), (16, "inval")] {
            if self.0 & bit != 0 {
                if !first {
                    f.write_str("|")?;
                }
                f.write_str(name)?;
                first = false;
            }
        }
        Ok(())
    }
}

impl fmt::Debug for Ready {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Ready({self})")
    }
}
