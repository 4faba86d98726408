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
pub struct Machine {
    shared: Arc<Mutex<Box<dyn Backend + Send>>>,
    layout: super::layout::Layout,
}

impl Machine {
    /// The host wstune runs on, with its default layout.
    pub fn live() -> Self {
        let layout = super::layout(None, None);
        Machine {
            shared: Arc::new(Mutex::new(super::live_at(&layout))),
            layout,
        }
    }

    /// `f` with the backend, to read several things at one go.
    pub fn with<R>(&self, f: impl FnOnce(&dyn Backend) -> R) -> R {
        // A reading that panicked left nothing half-written: the backend only reads.
        let backend = self.shared.lock().unwrap_or_else(|e| e.into_inner());
        f(backend.as_ref())
    }

    /// A backend of its own on the same machine, for a thread that reads it all along (the
    /// host watch beside a run), so the run's own readings never wait for it.
    pub fn reader(&self) -> Box<dyn Backend + Send> {
        super::live_at(&self.layout)
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
