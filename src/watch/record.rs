//! `watch --record FILE`: the frames as JSON lines behind one header line, written while any
//! view runs; `wstune report watch FILE` and the self-test read it back. Each line is written
//! whole; a recording cut short by a kill ends at its last whole line.

use super::frame::{Frame, SCHEMA};
use super::{Flow, View};
use crate::host::stream::LineStream;
use serde::{Deserialize, Serialize};
use std::path::Path;

/// The recording's first line.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Header {
    /// `wstune.watch-recording/1`.
    pub recording: String,
    pub frames: String,
    pub started: String,
    pub host: String,
    pub interval_s: f64,
    pub wstune: String,
    /// The command line's scope: ports, pid, admin address.
    pub scope: String,
}

pub const RECORDING: &str = "wstune.watch-recording/1";

pub struct Recorder {
    file: LineStream,
}

impl Recorder {
    pub fn create(path: &Path, header: &Header) -> std::io::Result<Recorder> {
        let mut file = LineStream::create(path)?;
        file.line(&serde_json::to_string(header).map_err(std::io::Error::other)?)?;
        Ok(Recorder { file })
    }
}

impl View for Recorder {
    fn show(&mut self, f: &Frame) -> std::io::Result<Flow> {
        self.file
            .line(&serde_json::to_string(f).map_err(std::io::Error::other)?)?;
        Ok(Flow::Go)
    }
}

/// A recording read back.
#[derive(Debug, Clone)]
pub struct Recording {
    pub header: Header,
    pub frames: Vec<Frame>,
    /// An unfinished last line was left out (the watch was killed while writing it).
    pub truncated: bool,
}

/// Parse a recording's text: the header, then one frame per line. Errors name the line.
pub fn parse(text: &str) -> Result<Recording, String> {
    let mut lines = text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty());
    let (_, first) = lines
        .next()
        .ok_or("the file is empty; give a file that `wstune watch --record FILE` wrote")?;
    let header: Header = serde_json::from_str(first).map_err(|_| {
        "its first line is not a watch recording's header; give a file that `wstune watch \
         --record FILE` wrote"
            .to_string()
    })?;
    if header.recording != RECORDING {
        return Err(format!(
            "a recording of format {} (this wstune reads {RECORDING}); render it with the wstune that wrote it",
            header.recording
        ));
    }
    let all: Vec<(usize, &str)> = lines.collect();
    let mut frames = Vec::with_capacity(all.len());
    let mut truncated = false;
    for (k, (i, l)) in all.iter().enumerate() {
        match serde_json::from_str::<Frame>(l) {
            Ok(f) if f.schema == SCHEMA => frames.push(f),
            Ok(f) => {
                return Err(format!(
                    "line {}: a frame of schema {} (this wstune reads {SCHEMA})",
                    i + 1,
                    f.schema
                ))
            }
            // Only the last line may be unfinished.
            Err(_) if k + 1 == all.len() && !text.ends_with('\n') => truncated = true,
            Err(e) => return Err(format!("line {}: not a frame ({e})", i + 1)),
        }
    }
    Ok(Recording {
        header,
        frames,
        truncated,
    })
}
