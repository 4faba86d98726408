//! Where a host path is on disk: the one mapping of `--root`, `--prefix` and Windows' state
//! directory, used by the backend's reads and writes and by the store of wstune's own files.

use std::path::{Path, PathBuf};

/// The host path of wstune's own state; [`Layout::with_state_dir`] can move it.
pub const STATE: &str = "/var/lib/wstune";

/// The paths `--prefix` moves: the configuration and state wstune writes.
pub fn is_prefixed(path: &str) -> bool {
    path == "/etc" || path.starts_with("/etc/") || path.starts_with(STATE)
}

#[derive(Debug, Clone, PartialEq)]
pub struct Layout {
    /// `/` for the live host, the tree for `--root`.
    root: PathBuf,
    /// `--prefix`: where /etc and /var/lib/wstune live instead.
    prefix: Option<PathBuf>,
    /// Where /var/lib/wstune lives instead: the live Windows host keeps it in
    /// `%ProgramData%\wstune`, where Windows operators look for a service's state.
    state_dir: Option<PathBuf>,
    /// `root` is a captured tree (`--root`), read by the fixture backend, not the live host.
    captured: bool,
}

impl Layout {
    /// Every path under `root`.
    pub fn at(root: &Path) -> Layout {
        Layout {
            root: root.to_path_buf(),
            prefix: None,
            state_dir: None,
            captured: false,
        }
    }

    /// Every path under the captured tree `root` (`--root`): [`super::open`] reads it with the
    /// fixture backend.
    pub fn captured(root: &Path) -> Layout {
        Layout {
            captured: true,
            ..Layout::at(root)
        }
    }

    /// The captured tree, when this is one.
    pub fn tree(&self) -> Option<&Path> {
        self.captured.then_some(self.root.as_path())
    }

    /// `--prefix`, when given.
    pub fn prefix(&self) -> Option<&Path> {
        self.prefix.as_deref()
    }

    /// The files wstune owns ([`is_prefixed`]) under `dir` instead.
    pub fn with_prefix(mut self, dir: &Path) -> Layout {
        self.prefix = Some(dir.to_path_buf());
        self
    }

    /// `/var/lib/wstune/...` under `dir` (`/var/lib/wstune/journal` -> `dir\journal`).
    pub fn with_state_dir(mut self, dir: &Path) -> Layout {
        self.state_dir = Some(dir.to_path_buf());
        self
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Where `host_path` (absolute, `/`-separated) is on disk.
    pub fn path(&self, host_path: &str) -> PathBuf {
        if let (Some(dir), Some(rest)) = (&self.state_dir, host_path.strip_prefix(STATE)) {
            if rest.is_empty() || rest.starts_with('/') {
                return rest
                    .split('/')
                    .filter(|c| !c.is_empty())
                    .fold(dir.clone(), |p, c| p.join(c));
            }
        }
        self.base(host_path).join(host_path.trim_start_matches('/'))
    }

    /// The directory `host_path` lies under: the prefix for the files it moves, else the root.
    /// A captured tree's reads must stay inside it.
    pub fn base(&self, host_path: &str) -> &Path {
        match &self.prefix {
            Some(p) if is_prefixed(host_path) => p,
            _ => &self.root,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_prefix_moves_only_what_wstune_owns() {
        let l = Layout::at(Path::new("/tree")).with_prefix(Path::new("/p"));
        assert_eq!(
            l.path("/etc/sysctl.d/x.conf"),
            Path::new("/p/etc/sysctl.d/x.conf")
        );
        assert_eq!(
            l.path("/var/lib/wstune/journal"),
            Path::new("/p/var/lib/wstune/journal")
        );
        assert_eq!(
            l.path("/proc/sys/fs/nr_open"),
            Path::new("/tree/proc/sys/fs/nr_open")
        );
        assert_eq!(l.base("/proc/meminfo"), Path::new("/tree"));
        assert_eq!(
            Layout::at(Path::new("/")).path("/etc/x"),
            Path::new("/etc/x")
        );
    }
}
