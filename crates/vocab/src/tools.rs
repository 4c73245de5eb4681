//! A tool as the providers are told of it, and what one call produced: what the turn loop, the
//! tools and the providers share.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// What one tool call produced.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolResult {
    /// False for a failure; the providers mark it (`is_error`, `ERROR: `).
    pub ok: bool,
    /// What the model reads.
    pub text: String,
    /// The one-line row the user sees.
    pub summary: String,
}

impl ToolResult {
    /// A success.
    pub fn ok(text: impl Into<String>, summary: impl Into<String>) -> Self {
        ToolResult {
            ok: true,
            text: text.into(),
            summary: summary.into(),
        }
    }

    /// A failure whose summary is its own first line (messages are written to fit one).
    pub fn fail(text: impl Into<String>) -> Self {
        let text = text.into();
        let summary = text.lines().next().unwrap_or_default().to_string();
        ToolResult {
            ok: false,
            text,
            summary,
        }
    }

    /// A failure with its own summary.
    pub fn fail_with(text: impl Into<String>, summary: impl Into<String>) -> Self {
        ToolResult {
            ok: false,
            text: text.into(),
            summary: summary.into(),
        }
    }
}

/// The catalogue entry the providers send for one tool.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ToolSpec {
    /// Tool name.
    pub name: &'static str,
    /// Tool description.
    pub description: &'static str,
    /// Argument schema.
    pub schema: Value,
}
