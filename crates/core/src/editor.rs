//! What the executor needs to know about an editor holding files open. The Neovim front end
//! answers from its buffers; the terminal and the one-tool front end have no editor.

use std::path::Path;

use futures::future::BoxFuture;

/// The executor's view of open buffers (SPEC section 1: unsaved changes are never overwritten,
/// unmodified buffers are reloaded after a write or a command).
pub trait Editor: Send + Sync {
    /// True when `path` is loaded in a buffer with unsaved changes.
    fn has_unsaved_changes<'a>(&'a self, path: &'a Path) -> BoxFuture<'a, bool>;
    /// Called after `path` was written: reload its buffer if loaded and unmodified.
    fn file_written<'a>(&'a self, path: &'a Path) -> BoxFuture<'a, ()>;
    /// Called after a command ran: re-read every unmodified buffer whose file changed.
    fn command_finished(&self) -> BoxFuture<'_, ()>;
    /// The text of the buffer holding `path` when it has unsaved changes (a prompt's `@path`
    /// attaches what the person sees); None when no buffer holds it or it is saved.
    fn unsaved_text<'a>(&'a self, _path: &'a Path) -> BoxFuture<'a, Option<String>> {
        Box::pin(async { None })
    }
}

/// No editor: nothing is open, nothing to reload.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoEditor;

impl Editor for NoEditor {
    fn has_unsaved_changes<'a>(&'a self, _path: &'a Path) -> BoxFuture<'a, bool> {
        Box::pin(async { false })
    }
    fn file_written<'a>(&'a self, _path: &'a Path) -> BoxFuture<'a, ()> {
        Box::pin(async {})
    }
    fn command_finished(&self) -> BoxFuture<'_, ()> {
        Box::pin(async {})
    }
}
