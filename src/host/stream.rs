//! Files written as they grow, a whole line at a time (`watch --record FILE`): unlike the
//! atomic writer's all-or-nothing files, a recording is useful while it is written (`tail -f`)
//! and after an interrupted run, so each line goes out in one write and a reader skips an
//! unfinished last line.

use std::io::Write;
use std::path::Path;

pub struct LineStream {
    file: std::fs::File,
}

impl LineStream {
    /// Create `path` (truncating a regular file there; refusing a directory, a FIFO or a
    /// device, which would block or never hold a recording).
    pub fn create(path: &Path) -> std::io::Result<LineStream> {
        if let Ok(m) = std::fs::metadata(path) {
            if !m.is_file() {
                return Err(std::io::Error::other(format!(
                    "{} exists and is not a regular file",
                    path.display()
                )));
            }
        }
        let file = std::fs::OpenOptions::new()
            .create(true)
            .write(true)
            .truncate(true)
            .open(path)?;
        Ok(LineStream { file })
    }

    /// Append `line` and its newline in one write.
    pub fn line(&mut self, line: &str) -> std::io::Result<()> {
        let mut buf = Vec::with_capacity(line.len() + 1);
        buf.extend_from_slice(line.as_bytes());
        buf.push(b'\n');
        self.file.write_all(&buf)
    }
}
