//! The once component: which timer belongs to which io watcher of a
//! [`Loop::once`](crate::Loop::once), so that whichever fires first can
//! remove the other.

use std::collections::HashMap;

use crate::slot_list::Slot;
use crate::Timer;

#[derive(Default)]
pub(crate) struct Onces {
    /// The io watcher's slot → its timeout.
    timeouts: HashMap<Slot, Timer>,
}

impl Onces {
    pub fn pair(&mut self, io: Slot, timeout: Timer) {
        self.timeouts.insert(io, timeout);
    }

    /// The timeout of the once whose io watcher is `io`, now unpaired.
    pub fn take(&mut self, io: Slot) -> Option<Timer> {
        self.timeouts.remove(&io)
    }
}
