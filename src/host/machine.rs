//! The machine wstune runs on, as what it measures there reads it: the self-test's kernel
//! counters, memory and ports, the load balancer's proxies. Never a `--root` tree: a captured
//! tree has nothing running, so its counters cannot move. Made once where a command starts
//! and handed down, so the code that measures names no host of its own.

use super::{Backend, ReadError};
use std::sync::{Arc, Mutex};

/// This machine's live backend, shared by the tasks and threads of one command. A backend
/// keeps state of its own (what it recorded), so each reading holds it alone for its
/// moment; readings are short file reads.
#[derive(Clone)]
pub struct Machine(Arc<Mutex<Box<dyn Backend + Send>>>);

impl Machine {
    /// The host wstune runs on, with its default layout.
    pub fn live() -> Self {
        Machine(Arc::new(Mutex::new(super::live_at(&super::layout(
            None, None,
        )))))
    }

    /// `f` with the backend, to read several things at one go.
    pub fn with<R>(&self, f: impl FnOnce(&dyn Backend) -> R) -> R {
        // A reading that panicked left nothing half-written: the backend only reads.
        let backend = self.0.lock().unwrap_or_else(|e| e.into_inner());
        f(backend.as_ref())
    }

    /// One file of the machine (/proc, /sys): [`Backend::read`].
    pub fn read(&self, path: &str) -> Result<String, ReadError> {
        self.with(|b| b.read(path))
    }

    /// Its memory page size: [`Backend::page_size`].
    pub fn page_size(&self) -> u64 {
        self.with(|b| b.page_size())
    }
}

impl std::fmt::Debug for Machine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Machine(live)")
    }
}
