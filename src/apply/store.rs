//! The files wstune owns and its journal are read and written by the host's store
//! (host/store.rs): apply names host paths, the host decides where they are and writes them
//! atomically.

pub use crate::host::store::{FileLock, FileState, Store};
