//! `watch --format json`: one frame per line on standard output, as the recording holds
//! them (docs/watch-frame.schema.json).

use crate::watch::frame::Frame;
use crate::watch::{Flow, View};
use std::io::Write;

pub struct Json<W: Write> {
    out: W,
}

impl<W: Write> Json<W> {
    pub fn new(out: W) -> Json<W> {
        Json { out }
    }
}

impl<W: Write> View for Json<W> {
    fn show(&mut self, f: &Frame) -> std::io::Result<Flow> {
        let line = serde_json::to_string(f).map_err(std::io::Error::other)?;
        writeln!(self.out, "{line}")?;
        self.out.flush()?;
        Ok(Flow::Go)
    }
}
