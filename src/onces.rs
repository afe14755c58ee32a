//! The once component: which timer belongs to which io watcher of a
//! [`Loop::once`](crate::Loop::once), so that whichever fires first can
//! remove the other.

use std::collections::HashMap;

use crate::handle::Key;
use crate::slot_list::Slot;

#[derive(Default)]
pub(crate) struct Onces {
    /// The io watcher's slot → its timeout timer's key (a key, not a
    /// `Timer`, so that this component needs no watcher module).
    timeouts: HashMap<Slot, Key>,
}

impl Onces {
    pub fn pair(&mut self, io: Slot, timeout: Key) {
        self.timeouts.insert(io, timeout);
    }

    /// The timeout of the once whose io watcher is `io`, now unpaired.
    pub fn take(&mut self, io: Slot) -> Option<Key> {
        self.timeouts.remove(&io)
    }
}
