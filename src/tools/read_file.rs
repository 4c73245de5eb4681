//! read_file (stub: being written).

use futures::future::BoxFuture;
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

use super::{Args, Tool, ToolContext, ToolResult};

/// read_file.
pub struct ReadFile;

impl Tool for ReadFile {
    fn name(&self) -> &'static str {
        "read_file"
    }
    fn description(&self) -> &'static str {
        "read_file"
    }
    fn schema(&self) -> Value {
        json!({})
    }
    fn mutating(&self) -> bool {
        false
    }
    fn run<'a>(
        &'a self,
        _args: Args<'a>,
        _cx: &'a ToolContext,
        _cancel: &'a CancellationToken,
    ) -> BoxFuture<'a, ToolResult> {
        Box::pin(async move { ToolResult::fail("not yet") })
    }
}
