//! Wrapper scripts: small `/bin/sh` programs a test puts where wstune expects a program (a
//! `serve --command` that misbehaves around the real server, a `sudo` that drops privileges,
//! an "upgrade" that cannot start), so the behaviour under test meets a real process.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// A `/bin/sh` script: `#!/bin/sh`, then each line given, written executable (0755).
pub struct Script {
    /// The lines after the `#!/bin/sh` line.
    lines: Vec<String>,
}

impl Script {
    pub fn sh() -> Script {
        Script { lines: Vec::new() }
    }

    /// One more line of shell.
    pub fn line(mut self, line: impl Into<String>) -> Script {
        self.lines.push(line.into());
        self
    }

    /// Write the script to `dir/name`, executable: its path.
    pub fn write(&self, dir: &Path, name: &str) -> PathBuf {
        let path = dir.join(name);
        let mut text = String::from("#!/bin/sh\n");
        for l in &self.lines {
            text.push_str(l);
            text.push('\n');
        }
        std::fs::write(&path, text).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        path
    }
}
