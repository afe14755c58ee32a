//! The backends compiled into the crate, one file each, and the choice of
//! one by name. The platform choice is made here, once, with `cfg`.

pub mod sim;
