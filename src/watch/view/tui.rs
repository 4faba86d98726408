use crate::watch::frame::Frame;
use crate::watch::{Flow, View};

/// The full-screen view (ratatui over crossterm).
pub struct Tui;

impl View for Tui {
    fn show(&mut self, _f: &Frame) -> std::io::Result<Flow> {
        Ok(Flow::Go)
    }
}
