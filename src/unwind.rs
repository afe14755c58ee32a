//! User code that the loop calls outside a callback (a custom schedule,
//! a cleanup callback, the drop of a removed watcher's captured state)
//! may panic while the loop is in the middle of a change that must be
//! finished. [`Held`] runs such steps one by one, keeps the first panic
//! instead of unwinding at once, and resumes it once every step has run:
//! the loop is consistent again by then, and the panic still propagates.

use std::any::Any;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};

/// The first panic among steps that must all run (see the module).
#[derive(Default)]
pub(crate) struct Held(Option<Box<dyn Any + Send + 'static>>);

impl Held {
    /// Runs `f`; if it panics, the panic is kept (the first one only) and
    /// `None` returned.
    ///
    /// Unwind safety is the caller's: each step is written so that a panic
    /// in it leaves nothing half-changed (the user code runs before or
    /// after the loop's own change, never between two parts of it).
    #[inline]
    pub fn run<T>(&mut self, f: impl FnOnce() -> T) -> Option<T> {
        match catch_unwind(AssertUnwindSafe(f)) {
            Ok(v) => Some(v),
            Err(panic) => {
                self.keep(panic);
                None
            }
        }
    }

    /// Drops `value` (user code in its `Drop`), keeping a panic.
    #[inline]
    pub fn drop<T>(&mut self, value: T) {
        self.run(move || drop(value));
    }

    /// Keeps `panic` unless one is kept already.
    pub fn keep(&mut self, panic: Box<dyn Any + Send + 'static>) {
        if self.0.is_none() {
            self.0 = Some(panic);
        }
    }

    /// Resumes the panic kept, if any. While the thread is unwinding
    /// already (a `Drop` run by another panic), it is discarded instead:
    /// a second panic out of a drop would abort the process.
    pub fn resume(self) {
        if let Some(panic) = self.0 {
            if !std::thread::panicking() {
                resume_unwind(panic);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[cfg_attr(
        target_os = "wasi",
        ignore = "wasm32-wasip1 aborts on a panic (no unwinding)"
    )]
    fn every_step_runs_and_the_first_panic_is_resumed() {
        let mut ran = vec![];
        let caught = catch_unwind(AssertUnwindSafe(|| {
            let mut held = Held::default();
            assert_eq!(held.run(|| 1), Some(1));
            held.run(|| -> u32 { panic!("first") });
            held.run(|| ran.push("after the first"));
            held.run(|| -> u32 { panic!("second") });
            ran.push("before resuming");
            held.resume();
        }));
        let panic = caught.unwrap_err();
        assert_eq!(panic.downcast_ref::<&str>(), Some(&"first"));
        assert_eq!(ran, ["after the first", "before resuming"]);
        Held::default().resume(); // nothing kept: nothing happens
    }

    #[test]
    #[cfg_attr(
        target_os = "wasi",
        ignore = "wasm32-wasip1 aborts on a panic (no unwinding)"
    )]
    fn while_unwinding_a_kept_panic_is_discarded() {
        struct ResumesInDrop;
        impl Drop for ResumesInDrop {
            fn drop(&mut self) {
                let mut held = Held::default();
                held.run(|| panic!("in a drop, during unwinding"));
                held.resume(); // must not abort the process
            }
        }
        let caught = catch_unwind(|| {
            let _d = ResumesInDrop;
            panic!("outer");
        });
        assert_eq!(caught.unwrap_err().downcast_ref::<&str>(), Some(&"outer"));
    }
}
